"""Engines that ship with the core distribution."""
