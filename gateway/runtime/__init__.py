"""The async drivers: fleet of links, request streams, jobs and their supervisor."""
