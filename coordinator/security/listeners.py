"""Kafka's listener settings: `listeners`, `advertised.listeners` and
`listener.security.protocol.map`, parsed into one ListenerSpec per listener.

A listener is NAME://HOST:PORT; NAME is a security protocol itself (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL) or is mapped to one by the protocol map. Clients that came in on
a listener are told that listener's advertised address (Metadata, FindCoordinator,
DescribeCluster), as Kafka answers from `request.context.listenerName`."""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"


class ListenerError(ValueError):
    """A listener setting that cannot be used (the config turns it into ConfigError)."""


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener: its name, security protocol, bind address and advertised address."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenerError(f"{what}: expected NAME://HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def parse_endpoints(text: str, what: str) -> dict[str, tuple[str, int]]:
    """`NAME://HOST:PORT,...` as {NAME: (host, port)}, in the order given (names upper-cased,
    as Kafka's ListenerName.normalised)."""
    endpoints: dict[str, tuple[str, int]] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, address = item.partition("://")
        name = name.strip().upper()
        if not sep or not name:
            raise ListenerError(f"{what}: expected NAME://HOST:PORT, got {item!r}")
        if name in endpoints:
            raise ListenerError(f"{what}: listener {name} appears twice")
        endpoints[name] = _host_port(address, what)
    return endpoints


def parse_protocol_map(text: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` (listener.security.protocol.map) as {NAME: PROTOCOL}."""
    mapping: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in PROTOCOLS:
            raise ListenerError(
                f"listener_security_protocol_map: expected NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(PROTOCOLS)}, got {item!r}"
            )
        mapping[name] = protocol
    return mapping


def listener_specs(
    listeners: str,
    advertised_listeners: str,
    protocol_map: str,
    legacy_listen: tuple[str, int],
    legacy_advertised: tuple[str, int] | None,
) -> list[ListenerSpec]:
    """The listeners to open, first the one named first. Empty `listeners`: one PLAINTEXT
    listener on `legacy_listen` (the `listen` setting) advertising `legacy_advertised`
    (the `advertised_listener` setting) when given. A listener without an advertised
    address advertises its own; a wildcard host there is refused. Raises ListenerError."""
    mapping = parse_protocol_map(protocol_map)
    if listeners.strip():
        bound = parse_endpoints(listeners, "listeners")
    else:
        bound = {"PLAINTEXT": legacy_listen}
    if not bound:
        raise ListenerError("listeners: at least one listener is needed")
    advertised = parse_endpoints(advertised_listeners, "advertised_listeners")
    for name in advertised:
        if name not in bound:
            raise ListenerError(f"advertised_listeners: {name} is not among the listeners")
    specs = []
    for index, (name, (host, port)) in enumerate(bound.items()):
        protocol = mapping.get(name)
        if protocol is None:
            raise ListenerError(
                f"listener {name} has no security protocol: name it after one or map it in "
                f"listener_security_protocol_map"
            )
        if name in advertised:
            adv_host, adv_port = advertised[name]
            if adv_host in ("0.0.0.0", "::"):
                raise ListenerError(
                    f"advertised_listeners: {name} cannot advertise the wildcard {adv_host}"
                )
        elif index == 0 and legacy_advertised is not None:
            adv_host, adv_port = legacy_advertised
        else:
            adv_host, adv_port = host, port
        if adv_host in ("0.0.0.0", "::", "") and listeners.strip():
            # Clients cannot connect to a wildcard (Kafka refuses it too); the single
            # listener of `listen` gets config.check_advertised's message instead.
            raise ListenerError(
                f"listener {name} binds {host or '0.0.0.0'!r}, which clients cannot connect "
                f"to: give its address in advertised_listeners (Kafka: advertised.listeners)"
            )
        specs.append(ListenerSpec(name, protocol, host or "0.0.0.0", port, adv_host, adv_port))
    ports = [s.port for s in specs if s.port]
    if len(ports) != len(set(ports)):
        raise ListenerError("listeners: each listener needs its own port")
    return specs
