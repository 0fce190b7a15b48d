"""Adapters that expose external game libraries as Spiral States."""
