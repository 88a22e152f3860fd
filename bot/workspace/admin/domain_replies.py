"""``/agent-limits allow-domain|deny-domain|clear-domain``'s replies and ``show``'s line about the host lists."""

from __future__ import annotations

from bot.i18n import N_, _
from bot.workspace.settings import Change, DomainAction, DomainLists


def domain_reply(host: str, action: DomainAction, change: Change | None) -> str:
    if change is None:
        already = {
            "allow": N_("`{host}` is allowed already; nothing changed."),
            "deny": N_("`{host}` is denied already; nothing changed."),
            "clear": N_("`{host}` is on no list already; nothing changed."),
        }[action]
        return _(already).format(host=host)
    now = {
        "allow": N_("`{host}` is now allowed: it (and its subdomains) may receive this workspace's data. Once a run "
                    "has read private data (channel history, others' messages, internal pages), its calls may still "
                    "send to it, whatever they carry. It applies from the next run."),
        "deny": N_("`{host}` is now denied: once a run has read private data, nothing reaches it, whatever else "
                   "allows it. It applies from the next run."),
        "clear": N_("`{host}` is now off both lists. It applies from the next run."),
    }[action]
    return _(now).format(host=host)


def format_domains(lists: DomainLists) -> str:
    """The ``show`` line: both lists, short."""
    def listed(hosts: tuple[str, ...]) -> str:
        shown = ", ".join(f"`{h}`" for h in hosts[:20])
        return _("{hosts} and {n} more").format(hosts=shown, n=len(hosts) - 20) if len(hosts) > 20 else shown

    return _("• Outbound hosts allowed after reading private data: {allowed}; denied: {denied}").format(
        allowed=listed(lists.allowed) or _("none"), denied=listed(lists.denied) or _("none"))
