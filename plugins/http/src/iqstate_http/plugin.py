"""iqstate-http as a plugin (entry point `http`); it registers no engines or queries."""
