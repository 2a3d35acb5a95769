"""crow.tools: the MCP client hub, permission policy, and the ACP tool-call surface."""
