"""Who may see what: principals (who asks, their groups and role), documents' access labels, and the filters that
retrieval applies inside the dense and the keyword search.

A document carries the access groups of its front matter or sidecar. A principal sees a document when they share
one of its groups; documents without groups follow the ungrouped policy (RAG_UNGROUPED); a document whose groups
could not be read is *locked*: only a principal holding every group (the local operator, a `*` key) sees it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rag.core.errors import ConfigError

Role = Literal["reader", "admin"]
ROLES: tuple[Role, ...] = ("reader", "admin")
ALL_GROUPS = "*"
GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
GROUP_KEY = "group:"  # one boolean metadata key per group: Chroma filters on it without any string matching
OPEN, GROUPED, LOCKED = "open", "grouped", "locked"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking: a name for logs and history, the groups they hold, and their role."""

    name: str
    groups: frozenset[str] = frozenset()
    role: Role = "reader"
    all_groups: bool = False  # holds every group, present and future (the local operator, a `*` grant)

    @property
    def is_admin(self) -> bool:
        """Whether they may change the index (upload, delete, sync) and read feedback."""
        return self.role == "admin"


LOCAL_OPERATOR = Principal("local operator", role="admin", all_groups=True)
ANONYMOUS = Principal("anonymous")


def groups_label(principal: Principal) -> str:
    """A principal's groups as stored beside what they asked: `*`, `|hr|finance|`, or `` for none."""
    return ALL_GROUPS if principal.all_groups else "".join(f"|{g}" for g in sorted(principal.groups)) + \
        ("|" if principal.groups else "")


def asked_within(label: str | None, principal: Principal) -> bool:
    """Whether the principal may read a question asked by someone holding `label` (groups_label): the `*`
    principal always; another only when the asker held no group beyond theirs (unknown: never)."""
    if principal.all_groups:
        return True
    if label is None or label == ALL_GROUPS:
        return False
    return {group for group in label.split("|") if group} <= principal.groups


def valid_group(name: str) -> bool:
    """Whether a group name is usable: letters, digits, `_.-`, up to 64 characters, not starting with a sign."""
    return GROUP_NAME.fullmatch(name) is not None


def parse_grant(groups: str, role: str, who: str) -> tuple[frozenset[str], bool, Role]:
    """Groups (`hr|finance`, or `*` for all) and role (`reader` by default) of one configured key or user."""
    names = {part.strip() for part in groups.split("|") if part.strip()}
    everything = ALL_GROUPS in names
    bad = sorted(name for name in names - {ALL_GROUPS} if not valid_group(name))
    if bad:
        raise ConfigError(f"{who}: invalid group name(s) {', '.join(map(repr, bad))} (letters, digits, _ . -)")
    chosen = role.strip() or "reader"
    for known in ROLES:
        if chosen == known:
            return frozenset(names - {ALL_GROUPS}), everything, known
    raise ConfigError(f"{who}: role must be reader or admin, not {chosen!r}")


@dataclass(frozen=True, slots=True)
class DocAccess:
    """A document's access: its groups, or locked when they could not be read (nobody but `*` sees it)."""

    groups: tuple[str, ...] = ()
    locked: bool = False

    @property
    def label(self) -> str:
        """A compact form for the keyword index and the manifest: `open`, `locked` or `|hr|finance|`."""
        if self.locked:
            return LOCKED
        return "|" + "|".join(self.groups) + "|" if self.groups else OPEN

    @property
    def kind(self) -> Literal["open", "grouped", "locked"]:
        """`locked`, `grouped` (readable groups) or `open` (no groups: RAG_UNGROUPED decides)."""
        return "locked" if self.locked else "grouped" if self.groups else "open"

    @classmethod
    def from_label(cls, label: str | None) -> DocAccess:
        """The inverse of `label`; a missing or unknown label is locked (fail closed)."""
        if label == OPEN:
            return cls()
        if label and label.startswith("|") and label.endswith("|") and len(label) > 2:
            groups = tuple(label.strip("|").split("|"))
            if all(valid_group(group) for group in groups):
                return cls(groups)
        return cls(locked=True)

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> DocAccess:
        """A stored chunk's access; chunks stored before access labels existed are locked until re-synced."""
        kind = meta.get("access")
        if kind == OPEN:
            return cls()
        if kind == GROUPED:
            return cls.from_label(str(meta.get("groups", "")))
        return cls(locked=True)

    def metadata(self, previous: tuple[str, ...] = ()) -> dict[str, str | bool]:
        """Chunk metadata: `access`, the `groups` label, and `group:NAME: True` per group. Groups of `previous`
        that are gone are set False (Chroma may merge metadata on update, and a stale True would leak)."""
        meta: dict[str, str | bool] = {"access": self.kind, "groups": self.label if self.kind == GROUPED else ""}
        meta.update({GROUP_KEY + group: False for group in previous if group not in self.groups or self.locked})
        if not self.locked:
            meta.update({GROUP_KEY + group: True for group in self.groups})
        return meta


def document_access(groups: object) -> DocAccess:
    """The access of a document from its front matter or sidecar value (a list or comma-separated string);
    a value that is not readable as group names locks the document."""
    if groups is None:
        return DocAccess()
    if not isinstance(groups, list | str):
        return DocAccess(locked=True)
    items = groups if isinstance(groups, list) else groups.split(",")
    names = {str(item).strip() for item in items if str(item).strip()}
    if not all(isinstance(item, str) for item in items) or not all(valid_group(name) for name in names):
        return DocAccess(locked=True)
    return DocAccess(tuple(sorted(names)))


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """The rule for documents without groups: everyone sees them (public) or nobody but `*` (private)."""

    ungrouped_public: bool = True

    def allows(self, principal: Principal, access: DocAccess) -> bool:
        """Whether the principal may see a document with this access."""
        if principal.all_groups:
            return True
        if access.locked:
            return False
        if not access.groups:
            return self.ungrouped_public
        return not principal.groups.isdisjoint(access.groups)

    def sees_nothing(self, principal: Principal) -> bool:
        """True when no document can be visible to the principal (no groups, ungrouped private)."""
        return not principal.all_groups and not principal.groups and not self.ungrouped_public

    def label_allows(self, principal: Principal, label: str | None) -> bool:
        """`allows` for a stored label (keyword index, manifest)."""
        return self.allows(principal, DocAccess.from_label(label))

    def visible_to(self, principal: Principal) -> Visible | None:
        """What a search must restrict itself to for the principal (None: nothing to restrict)."""
        return None if principal.all_groups else Visible(principal.groups, self.ungrouped_public,
                                                         lambda label: self.label_allows(principal, label))


@dataclass(frozen=True, slots=True)
class Visible:
    """The documents one asker may see, as a store filters by them: their groups, whether ungrouped documents are
    public, and the whole rule on a stored label (`admits`, which also keeps locked documents out). Each store turns
    this into its own query (Chroma's `where`: rag.components.store)."""

    groups: frozenset[str]
    ungrouped_public: bool
    admits: Callable[[str], bool]
