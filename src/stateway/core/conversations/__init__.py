"""Conversations: durable, editable lists of items that responses continue and extend.

:mod:`.commands` holds what a surface asks of a conversation; :mod:`.ports` declares what
the core needs from storage (:class:`.ports.ConversationStore`); :mod:`.service` handles
the conversation commands and gives a turn its context. How a turn takes, extends and
lets go of its conversation is written with its response row
(:class:`stateway.core.ports.ConversationTurn`), so it shares that row's transactions.
"""
