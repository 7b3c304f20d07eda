"""The pure core shared by the sync and asyncio clients: no I/O (docs/architecture.md).
Private: nothing here is public API (docs/compatibility.md)."""
