"""normbench's built-in backends, registered through entry points like any plugin."""
