"""The discovery catalog of /mcp/query: store, harvest jobs, the catalog.* tools and the `query discover` command."""
