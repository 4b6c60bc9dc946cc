"""Tools: ownership of declared tools and the model-visible catalog."""
