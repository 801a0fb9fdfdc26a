"""Finding sidecars at run time: DNS, Kubernetes EndpointSlices (discovery.runner owns them)."""
