"""Where the receptionist's tools were imported from before they moved to the agent's package:
`diffvoice.voice.receptionist.tools.served_tool_schemas` (as docs/tool-calling.md documented it),
`ReceptionistTools` and `default_book_path` are agent.tools' own. New code imports
`diffvoice.agent.tools`."""

from diffvoice.agent.tools import ReceptionistTools, default_book_path, served_tool_schemas

__all__ = ["ReceptionistTools", "default_book_path", "served_tool_schemas"]
