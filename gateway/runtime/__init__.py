"""The async drivers: fleet of links, request streams, dispatch."""
