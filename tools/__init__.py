"""Built-in tools a deployment can enable by module name in HERMES_TOOLS.

They are ordinary ``@tool`` functions, registered exactly the way a deployment's own are.
"""

__all__: list[str] = []
