"""Load a saved conversation, in any common format, as a list of LangChain messages.

Files (:func:`load_transcript`, or :func:`parse_transcript` for text already in memory) hold
either **one JSON document** or **JSONL** (one JSON value per line; blank lines are ignored; a
``.jsonl``/``.ndjson`` name always means JSONL). A JSON document is a bare list of messages, an
object with a ``"messages"`` list (a request body: ``model``, ``tools`` ... are ignored; for
Anthropic a top-level ``"system"`` becomes a leading ``SystemMessage``), or one message object.
Three message formats are understood:

``langchain``
    ``messages_to_dict`` items (``{"type": "human", "data": {...}}``) and ``dumpd`` objects
    (``{"lc": 1, "type": "constructor", "id": [..., "HumanMessage"], "kwargs": {...}}``, revived
    with ``allowed_objects="messages"``: nothing but message classes can be built from a file).
``openai``
    Chat Completions messages: roles ``system``, ``developer``, ``user``, ``assistant`` and
    ``tool``; ``tool_calls`` with JSON-string ``arguments`` (parsed into ``AIMessage.tool_calls``);
    content parts (``text``, ``image_url`` ...) are kept as the content list. The legacy
    ``function_call`` / role ``"function"`` is rejected.
``anthropic``
    Messages API: ``tool_use`` blocks become ``AIMessage.tool_calls`` (the other blocks stay the
    content: a string when only one plain text block is left, as ``ChatAnthropic`` does);
    each ``tool_result`` block of a user message becomes a ``ToolMessage`` (``status="error"``
    for ``is_error``, ``name`` from the matching ``tool_use``), in order, and the rest of that
    user message (text, images) a ``HumanMessage`` after them. ``thinking`` and
    ``redacted_thinking`` blocks are **kept** in the ``AIMessage`` content list (they carry the
    signature Anthropic needs to see them again, and they are part of what was said).

**Detection** (``format="auto"``; an explicit ``format=`` always wins): the first item decides
between LangChain (``type`` + ``data``, or an ``lc`` key) and a role format (a ``role`` key).
A role-format transcript is ``anthropic`` when there is a top-level ``system`` beside
``messages``, or any message has a ``tool_use``, ``tool_result``, ``thinking``,
``redacted_thinking`` or ``document`` block, or an ``image`` block with a ``source``; otherwise
it is ``openai`` (plain ``role``/``content`` text parses the same either way). Anything else is a
:class:`TranscriptError` naming the first item not recognised and the accepted formats.

Every transcript is checked before it is returned: a tool result must answer a tool call made
by an earlier AI message, and only once (a trailing call still waiting for its result is fine).
Messages without an id get ``f"{stem}-{index}"`` (``stem``: the file name without its
extension, ``index``: the position in the returned list), so the same file always gives the same
ids; ids already present are kept.

LangGraph threads are read from their checkpointer: :func:`messages_from_checkpointer` for any
``BaseCheckpointSaver``, :func:`load_sqlite_thread` and :func:`load_postgres_thread` for the
saved ones (both read only: nothing is created or written, ``.setup()`` is never called).

Every problem is a :class:`TranscriptError` whose text is one line naming the source, the line
or message (counted from 1) and what is wrong, ready for a command line to print. That holds for
hostile files too, and reading one is bounded: a file over ``max_bytes`` (default
``DEFAULT_MAX_BYTES``, 256 MiB) is refused before it is read; anything but a regular file (a
named pipe with no writer, ``/dev/zero``, a socket) is refused up front instead of read forever;
JSON nested deeper than ``MAX_JSON_DEPTH`` levels (the document, or a tool call's ``arguments``
string) is refused before the parser recurses; a number longer than Python's integer digit limit
and a ``dumpd`` placeholder (``{"lc": 1, "type": "not_implemented"}``) are errors naming the
line or message.

The modules: :mod:`~langmem_ext.replay.transcripts.parse` (detection, files and strings),
one module per format (:mod:`~langmem_ext.replay.transcripts.langchain`,
:mod:`~langmem_ext.replay.transcripts.openai`, :mod:`~langmem_ext.replay.transcripts.anthropic`),
:mod:`~langmem_ext.replay.transcripts.checkpoints` (LangGraph threads),
:mod:`~langmem_ext.replay.transcripts.reading` (what every format shares: errors, located items,
the tool-result check, ids) and :mod:`~langmem_ext.replay.transcripts.limits` (bounded reading).
"""

from langmem_ext.replay.transcripts.checkpoints import (
    load_postgres_thread,
    load_sqlite_thread,
    messages_from_checkpointer,
)
from langmem_ext.replay.transcripts.limits import (
    DEFAULT_MAX_BYTES,
    MAX_JSON_DEPTH,
    loads_bounded,
    read_bounded,
)
from langmem_ext.replay.transcripts.parse import Format, load_transcript, parse_transcript
from langmem_ext.replay.transcripts.reading import Transcript, TranscriptError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_JSON_DEPTH",
    "Format",
    "Transcript",
    "TranscriptError",
    "load_postgres_thread",
    "load_sqlite_thread",
    "load_transcript",
    "loads_bounded",
    "messages_from_checkpointer",
    "parse_transcript",
    "read_bounded",
]
