"""crow.agent: the persistent agent. Import from the concept modules."""
