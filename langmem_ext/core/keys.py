"""Who a memory belongs to: ``MemoryKey(tenant, user, session)`` and its store namespaces.

Memory outside the graph state (the chat-history surface, retrieval indexes) lives in a LangGraph
``BaseStore`` under a namespace built from the key. Two different keys never share a namespace:
every part is percent-encoded on its own (``/``, ``:``, ``.`` and ``%`` included), so
``MemoryKey("a:b", "c")`` and ``MemoryKey("a", "b:c")`` are different keys, and every label is
non-empty and free of ``.`` (which LangGraph's stores reserve as their namespace separator).

``MemoryKey.from_config(config)`` reads the parts from ``config["configurable"]``
(``tenant_id``, ``user_id``, then ``session_id`` or ``thread_id``). A missing part falls back to
``"default"``, unless ``require_explicit_key=True``: then it fails closed with
:class:`MissingKeyError`, so a multi-tenant service can never read a shared default memory.

Isolation fails closed for every key, however it was made. Memory kept outside the graph state
(``Retrieval``, the chat-history surface over a store) calls :meth:`MemoryKey.require` for its
scope, and a part that scope needs counts as missing when it was not given (``defaulted``) *or*
its value is the shared ``"default"``: ``MemoryKey(session="s")`` names no user, so a
``scope="user"`` memory refuses it exactly as it refuses a config without ``user_id``. Sharing a
default memory is an explicit opt-in (``shared_default=True``), never a fallback. Memory kept in
the graph state (``MemoryNode``, ``MemoryMiddleware``) is per thread already and needs no key.

Every part must be encodable text: a lone surrogate (``"\\ud800"``, e.g. from a badly decoded
header) is refused with a ``ValueError`` naming the part, not a ``UnicodeEncodeError`` from deep
inside a store call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from langmem_ext.errors import MissingKeyError

__all__ = ["DEFAULT", "MemoryKey", "MissingKeyError"]

DEFAULT = "default"
_PARTS = ("tenant", "user", "session")
#: where ``from_config`` looks, in order, for each part
CONFIG_FIELDS: dict[str, tuple[str, ...]] = {
    "tenant": ("tenant_id", "tenant"),
    "user": ("user_id", "user"),
    "session": ("session_id", "thread_id", "conversation_id"),
}


def _encode(part: str) -> str:
    # quote() leaves "." alone (unreserved), but "." is the stores' separator: encode it too
    return quote(part, safe="").replace(".", "%2E")


@dataclass(frozen=True, slots=True)
class MemoryKey:
    """The owner of a memory. Every part is a non-empty string.

    Example:
        >>> key = MemoryKey("acme", "u42", "chat-1")
        >>> key.namespace("history")
        ('langmem_ext', 'history', 'acme', 'u42', 'chat-1')
        >>> MemoryKey("a:b", "c").encode() != MemoryKey("a", "b:c").encode()
        True
        >>> MemoryKey.decode(MemoryKey("t.1", "a/b", "%").encode())
        MemoryKey(tenant='t.1', user='a/b', session='%')
    """

    tenant: str = DEFAULT
    user: str = DEFAULT
    session: str = DEFAULT
    #: the parts that were not given and fell back to ``"default"`` (set by ``from_config``;
    #: not part of the key's identity: equal keys are equal whatever was defaulted)
    defaulted: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        unknown = set(self.defaulted) - set(_PARTS)
        if unknown:
            raise ValueError(f"MemoryKey.defaulted names unknown parts: {sorted(unknown)}")
        object.__setattr__(self, "defaulted", frozenset(self.defaulted))
        for name in _PARTS:
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"MemoryKey.{name} must be a str, got {type(value).__name__}")
            if not value:
                raise ValueError(f"MemoryKey.{name} must not be empty")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"MemoryKey.{name} must be encodable text: {value!r} holds a lone surrogate "
                    f"at index {exc.start} (decode the source with errors='strict' or "
                    f"'replace')"
                ) from None

    def labels(self) -> tuple[str, str, str]:
        """The encoded parts: namespace labels with no ``.``, never empty, never colliding."""
        return (_encode(self.tenant), _encode(self.user), _encode(self.session))

    def missing_for(self, scope: str) -> tuple[str, ...]:
        """The parts that identify a ``scope`` (``"session"``: the session; ``"user"``: the
        user; ``"tenant"``: the tenant) and are the shared ``"default"``: not given (listed in
        ``defaulted``) or given as ``"default"``, which is the same memory for every caller.
        Memory that lives outside the graph state must not run on such a key unless the
        application opts into a shared default explicitly: two users without a user would
        otherwise read each other's memory, whether the key came from a config or was built
        by hand (``MemoryKey(session="s")`` has no user)."""
        needed = {"tenant": ("tenant",), "user": ("user",), "session": ("session",)}.get(scope)
        if needed is None:
            raise ValueError(f"scope must be 'tenant', 'user' or 'session', got {scope!r}")
        return tuple(
            part for part in needed if part in self.defaulted or getattr(self, part) == DEFAULT
        )

    def require(self, scope: str, *, owner: str, opt_out: str) -> None:
        """Raise :class:`MissingKeyError` when a part ``scope`` needs is the shared default (see
        :meth:`missing_for`). ``owner`` names what needs the key, ``opt_out`` the parameter that
        allows sharing."""
        missing = self.missing_for(scope)
        if missing:
            raise MissingKeyError(
                missing,
                CONFIG_FIELDS,
                reason=(
                    f"{owner} keeps memory outside the graph state at scope={scope!r}, and "
                    f"without {' and '.join(missing)} every caller would share one memory (a "
                    f"part left out of MemoryKey(...) or given as {DEFAULT!r} is the shared "
                    f"default); pass them in config['configurable'] (or key=MemoryKey(...)), or "
                    f"set {opt_out}=True to share a default memory on purpose"
                ),
            )

    def namespace(self, kind: str, *, scope: str = "session") -> tuple[str, ...]:
        """The store namespace for this key's ``kind`` of data (``"history"``, ``"turns"`` ...).

        ``scope="user"`` stops after the user (a prefix of all of the user's sessions), and
        ``scope="tenant"`` after the tenant; namespaces of different tenants never share a prefix
        longer than ``("langmem_ext", kind)``.
        """
        if not kind or "." in kind:
            raise ValueError(f"namespace kind must be non-empty and contain no '.', got {kind!r}")
        depth = {"tenant": 1, "user": 2, "session": 3}.get(scope)
        if depth is None:
            raise ValueError(f"scope must be 'tenant', 'user' or 'session', got {scope!r}")
        return ("langmem_ext", kind, *self.labels()[:depth])

    def encode(self) -> str:
        """One string for the key, e.g. for a file name or a log line; :meth:`decode` inverts it."""
        return "/".join(self.labels())

    @classmethod
    def decode(cls, text: str) -> MemoryKey:
        parts = text.split("/")
        if len(parts) != 3:
            raise ValueError(f"not an encoded MemoryKey (tenant/user/session): {text!r}")
        tenant, user, session = (unquote(p) for p in parts)
        return cls(tenant, user, session)

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | None,
        *,
        require_explicit_key: bool = False,
        fields: Mapping[str, tuple[str, ...]] | None = None,
    ) -> MemoryKey:
        """The key in a runnable config's ``configurable`` section.

        ``fields`` overrides where each part is looked up (see ``CONFIG_FIELDS``). Values are
        turned into strings (``user_id=42`` gives ``"42"``); ``None`` and ``""`` count as missing.
        """
        looked_in = {**CONFIG_FIELDS, **(fields or {})}
        configurable = (config or {}).get("configurable") or {}
        if not isinstance(configurable, Mapping):
            raise TypeError(f"config['configurable'] must be a mapping, got {configurable!r}")
        found: dict[str, str] = {}
        missing: list[str] = []
        for part in _PARTS:
            value = next(
                (configurable[f] for f in looked_in[part] if configurable.get(f) not in (None, "")),
                None,
            )
            if value is None:
                missing.append(part)
            else:
                found[part] = str(value)
        if missing and require_explicit_key:
            raise MissingKeyError(tuple(missing), looked_in)
        return cls(**found, defaulted=frozenset(missing))
