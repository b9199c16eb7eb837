"""Database targets and access shared by the handlers: target and auth profiles, pools,
the engines (backends/engines: one module per database engine), value encoding, privilege checks and the one read-only SQL path (`backends.sql`).

Imports go one way: handlers -> backends -> gateway's core (errors, runtime, store, variables).
"""
