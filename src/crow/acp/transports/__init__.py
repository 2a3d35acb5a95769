"""Transports: each turns bytes into JSON-RPC frames and nothing more."""
