"""``STATEWAY_*`` variables that set nothing, in process (``tests/cli/test_serve.py``
runs the command that warns of them)."""

from pathlib import Path

from stateway.config import Overrides, load_config
from stateway.stray_variables import stray_variables


def test_each_variable_that_sets_nothing_is_warned_of_with_the_nearest_setting(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stateway.toml"
    path.write_text(
        '[[backends]]\nname = "up"\nurl = "http://127.0.0.1:8000/v1"\n'
        'api_key_env = "STATEWAY_VLLM_KEY"\n'
        '[admin]\napi_key_env = "STATEWAY_OPS_KEY"\n'
        '[mcp_servers.docs]\nurl = "http://mcp/mcp"\n'
        'headers_env = { Authorization = "STATEWAY_DOCS_AUTH" }\n'
        '[web_search]\napi_key_env = "STATEWAY_SEARCH_KEY"\n'
    )
    config = load_config(Overrides(config=str(path)), {})
    env = dict.fromkeys(
        [
            "STATEWAY_PROT",  # for STATEWAY_PORT
            "STATEWAY_UPSTREAM_URL",  # for STATEWAY_UPSTREAM
            "STATEWAY_FOO",  # near no variable
            "STATEWAY_VLLM_KEY",  # named by the file: read
            "STATEWAY_OPS_KEY",
            "STATEWAY_DOCS_AUTH",
            "STATEWAY_SEARCH_KEY",
            "STATEWAY_MAX_BODY_BYTES",  # a setting's
            "STATEWAY_CONFIG",  # a flag's
            "STATEWAY_SEALING_KEY",
            "STATEWAY_TEST_POSTGRES_URL",  # the test suite's
            "STATEWAY_HYPOTHESIS_PROFILE",
            "OTHER_PROT",  # not the gateway's
        ],
        "1",
    )
    assert stray_variables(config, env) == [
        "STATEWAY_FOO is no setting's variable (ignored)",
        "STATEWAY_PROT is no setting's variable (ignored); did you mean STATEWAY_PORT?",
        "STATEWAY_UPSTREAM_URL is no setting's variable (ignored); did you mean STATEWAY_UPSTREAM?",
    ]
