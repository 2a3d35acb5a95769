"""crow.servers: Crow's built-in MCP servers, each runnable alone."""
