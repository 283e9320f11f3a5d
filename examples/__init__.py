"""Example workspaces from the mission's stories, with their runner scripts.

``payroll``: a monthly payroll session that runs on the 1st of each month and whenever its
rates table changes. ``apidocs``: a session that regenerates an API summary whenever a file
under ``src/`` changes. ``procession demo`` copies these two into a folder beside the demo
workspace and wires them up. ``team``: a coordinator that spawns two narrow sessions of other
agents through its own Procession MCP server, sends each its part, waits for both and merges
their findings (the README's "Agents that manage sessions").
"""
