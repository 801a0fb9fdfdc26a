"""DNS SRV lookups for DNS discovery, through dnspython (the optional `dns` extra)."""

from __future__ import annotations

from gateway.discovery.dns import Resolver

try:
    import dns.asyncresolver
    import dns.exception
    import dns.rdtypes.IN.SRV
except ImportError:  # pragma: no cover - the extra is not installed
    dns = None  # type: ignore[assignment]


def srv_resolver(nameserver: tuple[str, int] | None = None) -> Resolver:
    """A resolver of SRV names -> [(target host, port)]; `nameserver`: (address, port) to ask
    instead of the system's (/etc/resolv.conf)."""
    if dns is None:
        raise ValueError("discovery.dns.srv needs dnspython: pip install 'shardgate[dns]'")
    resolver = dns.asyncresolver.Resolver(configure=nameserver is None)
    if nameserver is not None:
        resolver.nameservers = [nameserver[0]]
        resolver.port = nameserver[1]

    async def resolve(name: str, port: int) -> list[tuple[str, int]]:
        try:
            answer = await resolver.resolve(name, "SRV", search=False)
        except dns.exception.DNSException as e:
            raise OSError(f"SRV {name}: {e}") from e
        out = set()
        for r in answer:
            assert isinstance(r, dns.rdtypes.IN.SRV.SRV)
            out.add((r.target.to_text(omit_final_dot=True), int(r.port)))
        return sorted(out)

    return resolve
