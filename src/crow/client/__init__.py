"""crow.client: the line client (crow run, crow chat, crow sessions). Import from the modules."""
