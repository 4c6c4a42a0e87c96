"""The deployment files hold the topology README.md "Deployment shapes" promises.

``docker-compose.yml`` is parsed as YAML (anchors and merge keys resolved, as Compose does) and
``deploy/nginx.conf`` with a small parser of nginx's syntax; no Docker is needed. Checked: one
PostgreSQL, two stateless API replicas (``DPMINE_JOB_WORKERS=0``) and two ``dpmine-server
worker`` processes with one database URL, secret and data volume; the proxy as the only
published port, balancing over both replicas; workers started after the API is healthy; every
secret taken from the operator's environment, none written in the file.
"""

from __future__ import annotations

import functools
import importlib
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dpmine_server.api.limits import UPLOAD_FORM_ALLOWANCE
from dpmine_server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
README = ROOT / "README.md"

API_SERVICES = ("api1", "api2")
WORKER_SERVICES = ("worker1", "worker2")
DPMINE_SERVICES = API_SERVICES + WORKER_SERVICES
#: What the operator must set: Compose refuses to start without them (``${NAME:?message}``).
REQUIRED_VARIABLES = frozenset(
    {"POSTGRES_PASSWORD", "DPMINE_SECRET_KEY", "DPMINE_BOOTSTRAP_OWNER_KEY"}
)
#: Environment variables whose values are secrets.
SECRET_NAME = re.compile(r"SECRET|PASSWORD|_KEY$")
#: A Compose variable reference: ``$NAME``, ``${NAME}``, ``${NAME:?msg}``, ``${NAME:-default}``...
REFERENCE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_]\w*)(?P<modifier>[^}]*)\}|(?P<bare>[A-Za-z_]\w*))"
)
REQUIRED_MODIFIER = re.compile(r":\?\S.*")
DATABASE_URL = re.compile(
    r"postgresql\+psycopg://(?P<user>[^:@/]+):(?P<password>\$\{[^}]+\})"
    r"@(?P<host>[^:@/]+):(?P<port>\d+)/(?P<database>[^/?]+)"
)


# -- reading docker-compose.yml ----------------------------------------------------------------


def load_yaml(text: str) -> object:
    """PyYAML's ``safe_load`` (PyYAML has no type hints and the project installs no stubs)."""
    loaded: object = importlib.import_module("yaml").safe_load(text)
    return loaded


def as_mapping(value: object, where: str) -> dict[str, object]:
    assert isinstance(value, dict), f"{where}: expected a mapping, got {value!r}"
    assert all(isinstance(key, str) for key in value), f"{where}: non-string keys"
    return {str(key): item for key, item in value.items()}


def as_list(value: object, where: str) -> list[object]:
    """A list, or an absent key (None) as the empty list."""
    if value is None:
        return []
    assert isinstance(value, list), f"{where}: expected a list, got {value!r}"
    return list(value)


def as_strings(value: object, where: str) -> list[str]:
    assert isinstance(value, list), f"{where}: expected a list, got {value!r}"
    assert all(isinstance(item, str) for item in value), f"{where}: expected strings"
    return [str(item) for item in value]


@functools.cache
def compose() -> dict[str, object]:
    return as_mapping(load_yaml(COMPOSE_FILE.read_text(encoding="utf-8")), "docker-compose.yml")


def services() -> dict[str, dict[str, object]]:
    found = as_mapping(compose().get("services"), "services")
    return {name: as_mapping(spec, name) for name, spec in found.items()}


def service(name: str) -> dict[str, object]:
    found = services()
    assert name in found, f"no service {name!r} in docker-compose.yml"
    return found[name]


def environment(name: str) -> dict[str, str]:
    """A service's environment, from the mapping or the list (``KEY=value``) form."""
    raw = service(name).get("environment", {})
    pairs: list[tuple[str, object]] = []
    if isinstance(raw, list):
        for item in as_strings(raw, f"{name}.environment"):
            key, _, text = item.partition("=")
            pairs.append((key, text))
    else:
        pairs = list(as_mapping(raw, f"{name}.environment").items())
    result: dict[str, str] = {}
    for key, value in pairs:
        assert isinstance(value, str | int), f"{name}.environment.{key}: {value!r}"
        assert not isinstance(value, bool), f"{name}.environment.{key}: quote {value!r}"
        result[key] = str(value)
    return result


def command(name: str) -> list[str]:
    raw = service(name).get("command")
    if isinstance(raw, str):
        return shlex.split(raw)
    return as_strings(raw, f"{name}.command")


def option(arguments: list[str], flag: str) -> str | None:
    """The value of ``--flag value`` or ``--flag=value`` in a command line."""
    for index, argument in enumerate(arguments):
        if argument == flag and index + 1 < len(arguments):
            return arguments[index + 1]
        if argument.startswith(f"{flag}="):
            return argument.split("=", 1)[1]
    return None


def mounts(name: str) -> dict[str, str]:
    """A service's volumes: target path → source (named volume or host path)."""
    result: dict[str, str] = {}
    for entry in as_list(service(name).get("volumes"), f"{name}.volumes"):
        if isinstance(entry, str):
            parts = entry.split(":")
            assert len(parts) in {2, 3}, f"{name}.volumes: {entry!r} is not source:target[:mode]"
            result[parts[1]] = parts[0]
        else:
            spec = as_mapping(entry, f"{name}.volumes")
            result[str(spec["target"])] = str(spec["source"])
    return result


def depends_on(name: str) -> dict[str, str]:
    """A service's dependencies with their conditions (the list form means started)."""
    raw = service(name).get("depends_on", {})
    if isinstance(raw, list):
        return dict.fromkeys(as_strings(raw, f"{name}.depends_on"), "service_started")
    conditions = as_mapping(raw, f"{name}.depends_on")
    return {
        dependency: str(as_mapping(spec, f"{name}.depends_on.{dependency}").get("condition"))
        for dependency, spec in conditions.items()
    }


@dataclass(frozen=True)
class PublishedPort:
    host_ip: str
    published: str
    target: int


def published_ports(name: str) -> list[PublishedPort]:
    result: list[PublishedPort] = []
    for entry in as_list(service(name).get("ports"), f"{name}.ports"):
        if isinstance(entry, str):
            parts = entry.split(":")
            target = parts[-1].split("/", 1)[0]
            published = parts[-2] if len(parts) >= 2 else ""
            host_ip = ":".join(parts[:-2])
            result.append(PublishedPort(host_ip, published, int(target)))
        else:
            spec = as_mapping(entry, f"{name}.ports")
            result.append(
                PublishedPort(
                    str(spec.get("host_ip", "")),
                    str(spec.get("published", "")),
                    int(str(spec["target"])),
                )
            )
    return result


def healthcheck(name: str) -> dict[str, object]:
    return as_mapping(service(name).get("healthcheck", {}), f"{name}.healthcheck")


def healthcheck_command(name: str) -> str:
    test = healthcheck(name).get("test")
    assert not healthcheck(name).get("disable"), f"{name}: health check disabled"
    return test if isinstance(test, str) else " ".join(as_strings(test, f"{name}.healthcheck.test"))


def api_port() -> int:
    """The port both API replicas listen on (their `serve --port`)."""
    ports = {option(command(name), "--port") for name in API_SERVICES}
    assert len(ports) == 1, f"the API replicas listen on different ports: {ports}"
    (port,) = ports
    assert port is not None, "the API replicas need an explicit --port"
    assert port.isdigit(), f"--port {port}"
    return int(port)


def variable_references(text: str) -> Iterator[tuple[str, str]]:
    """Every Compose variable reference of a text: (name, modifier) (``$$`` is a literal $)."""
    for match in REFERENCE.finditer(text.replace("$$", "")):
        if match["bare"]:
            yield match["bare"], ""
        else:
            yield match["braced"], match["modifier"]


# -- reading deploy/nginx.conf -----------------------------------------------------------------


@dataclass(frozen=True)
class Directive:
    name: str
    args: tuple[str, ...]
    block: tuple[Directive, ...] | None


NGINX_TOKEN = re.compile(r"""\s+|#[^\n]*|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[{};]|[^\s{};"'#]+""")


def nginx_tokens(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    while position < len(text):
        match = NGINX_TOKEN.match(text, position)
        assert match is not None, f"nginx: cannot read {text[position : position + 40]!r}"
        token = match.group()
        position = match.end()
        if token.isspace() or token.startswith("#"):
            continue
        tokens.append(token[1:-1] if token[0] in "\"'" else token)
    return tokens


def parse_nginx(text: str) -> tuple[Directive, ...]:
    """nginx's configuration syntax: directives ``name args;`` and blocks ``name args { ... }``."""
    tokens = nginx_tokens(text)

    def block(index: int, *, nested: bool) -> tuple[tuple[Directive, ...], int]:
        directives: list[Directive] = []
        while index < len(tokens):
            if tokens[index] == "}":
                assert nested, "nginx: unmatched '}'"
                return tuple(directives), index + 1
            words: list[str] = []
            while index < len(tokens) and tokens[index] not in {";", "{", "}"}:
                words.append(tokens[index])
                index += 1
            assert words, f"nginx: {tokens[index]!r} without a directive"
            assert index < len(tokens), f"nginx: unterminated directive {words}"
            if tokens[index] == ";":
                directives.append(Directive(words[0], tuple(words[1:]), None))
                index += 1
            else:
                assert tokens[index] == "{", f"nginx: '}}' after {words}"
                inner, index = block(index + 1, nested=True)
                directives.append(Directive(words[0], tuple(words[1:]), inner))
        assert not nested, "nginx: unclosed '{'"
        return tuple(directives), index

    directives, _ = block(0, nested=False)
    return directives


def find(directives: tuple[Directive, ...] | None, name: str) -> list[Directive]:
    return [directive for directive in directives or () if directive.name == name]


def the_one(directives: tuple[Directive, ...] | None, name: str) -> Directive:
    found = find(directives, name)
    assert len(found) == 1, f"nginx: expected one {name!r}, found {len(found)}"
    return found[0]


def nginx_size(value: str) -> int:
    """``client_max_body_size`` units: bytes, k, m, g (0 is unlimited)."""
    match = re.fullmatch(r"(\d+)([kKmMgG]?)", value)
    assert match is not None, f"nginx: bad size {value!r}"
    scale = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match[2].lower()]
    return int(match[1]) * scale


def nginx_seconds(value: str) -> float:
    """nginx time units (one unit; seconds by default)."""
    match = re.fullmatch(r"(\d+)(ms|s|m|h|d)?", value)
    assert match is not None, f"nginx: bad time {value!r}"
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[match[2]]
    return int(match[1]) * scale


@dataclass(frozen=True)
class ProxySite:
    """The proxy's server block (the one listening on the published container port) and the
    upstream its ``location /`` passes to."""

    server: Directive
    location: Directive
    upstream: Directive


def proxy_site() -> ProxySite:
    configs = {
        target: source for target, source in mounts("proxy").items() if target.endswith(".conf")
    }
    assert len(configs) == 1, f"the proxy mounts one nginx config, not {configs}"
    ((target, source),) = configs.items()
    # The official image includes conf.d/*.conf inside its http block.
    assert target.startswith("/etc/nginx/conf.d/"), f"{target} is not read by nginx"
    path = (COMPOSE_FILE.parent / source).resolve()
    assert path.is_relative_to(ROOT / "deploy"), f"{source} is not in deploy/"
    assert path.is_file(), f"{source} is missing"
    directives = parse_nginx(path.read_text(encoding="utf-8"))
    (port,) = published_ports("proxy")
    servers = [
        server
        for server in find(directives, "server")
        if any(
            listen.args[0].rsplit(":", 1)[-1] == str(port.target)
            for listen in find(server.block, "listen")
        )
    ]
    assert len(servers) == 1, f"one nginx server must listen on port {port.target}"
    locations = [loc for loc in find(servers[0].block, "location") if loc.args == ("/",)]
    assert len(locations) == 1, "the proxy's server needs one `location /`"
    proxy_pass = the_one(locations[0].block, "proxy_pass").args
    assert len(proxy_pass) == 1, proxy_pass
    assert proxy_pass[0].startswith("http://"), proxy_pass
    upstream_name = proxy_pass[0].removeprefix("http://").rstrip("/")
    upstreams = [up for up in find(directives, "upstream") if up.args == (upstream_name,)]
    assert len(upstreams) == 1, f"no upstream {upstream_name!r} for proxy_pass"
    return ProxySite(server=servers[0], location=locations[0], upstream=upstreams[0])


def setting(site: ProxySite, name: str) -> tuple[str, ...]:
    """A directive's arguments in ``location /`` or, inherited, in its server block."""
    for scope in (site.location, site.server):
        found = find(scope.block, name)
        if found:
            assert len(found) == 1, f"nginx: {name} set twice"
            return found[0].args
    raise AssertionError(f"nginx: {name} is not set for `location /`")


# -- the topology ------------------------------------------------------------------------------


def test_the_services_are_postgres_two_api_replicas_a_proxy_and_two_workers() -> None:
    assert set(services()) == {"db", "proxy", *API_SERVICES, *WORKER_SERVICES}


def test_postgres_keeps_its_data_in_a_named_volume_and_has_a_readiness_check() -> None:
    db = service("db")
    assert str(db.get("image", "")).startswith("postgres:"), db.get("image")
    source = mounts("db").get("/var/lib/postgresql/data")
    assert source in as_mapping(compose().get("volumes"), "volumes"), "db data: a named volume"
    assert "pg_isready" in healthcheck_command("db")


def test_api_replicas_serve_with_no_local_workers_and_a_health_check() -> None:
    port = api_port()
    for name in API_SERVICES:
        arguments = command(name)
        assert arguments[:2] == ["dpmine-server", "serve"], arguments
        assert option(arguments, "--host") == "0.0.0.0", f"{name} must listen on all interfaces"
        assert environment(name).get("DPMINE_JOB_WORKERS") == "0", f"{name} starts workers"
        assert service(name).get("build") == ".", f"{name}: the repository's Dockerfile"
        probe = healthcheck_command(name)
        assert re.search(rf"(127\.0\.0\.1|localhost):{port}/v1/health\b", probe), probe


def test_every_dpmine_process_shares_one_database_secret_and_data_volume() -> None:
    named_volumes = as_mapping(compose().get("volumes"), "volumes")
    for variable in ("DPMINE_DATABASE_URL", "DPMINE_SECRET_KEY", "DPMINE_DATA_DIR"):
        values = {name: environment(name).get(variable) for name in DPMINE_SERVICES}
        assert None not in values.values(), values
        assert len(set(values.values())) == 1, values
    for name in DPMINE_SERVICES:
        assert environment(name).get("DPMINE_ENVIRONMENT") == "production", name
    data_dir = environment(API_SERVICES[0])["DPMINE_DATA_DIR"]
    sources = {name: mounts(name).get(data_dir) for name in DPMINE_SERVICES}
    assert len(set(sources.values())) == 1, f"one data volume at {data_dir}: {sources}"
    assert sources[API_SERVICES[0]] in named_volumes, "the data folder is a named volume"

    url = DATABASE_URL.fullmatch(environment(API_SERVICES[0])["DPMINE_DATABASE_URL"])
    assert url is not None, "DPMINE_DATABASE_URL: postgresql+psycopg://user:${...}@host:port/db"
    db = environment("db")
    assert (url["host"], url["port"]) == ("db", "5432")
    assert (url["user"], url["database"]) == (db["POSTGRES_USER"], db["POSTGRES_DB"])
    assert url["password"] == db["POSTGRES_PASSWORD"], "the URL's password is db's password"


def test_only_the_proxy_publishes_a_port() -> None:
    published = {name: published_ports(name) for name in services()}
    assert {name for name, ports in published.items() if ports} == {"proxy"}, published
    assert len(published["proxy"]) == 1, published["proxy"]
    for name, spec in services().items():
        assert spec.get("network_mode") != "host", f"{name} bypasses the published ports"


def test_the_proxy_balances_over_both_api_replicas_on_their_port() -> None:
    site = proxy_site()
    port = api_port()
    members = find(site.upstream.block, "server")
    assert sorted(member.args[0] for member in members) == sorted(
        f"{name}:{port}" for name in API_SERVICES
    ), members
    for member in members:
        assert not {"backup", "down"} & set(member.args[1:]), f"{member} takes no traffic"
    assert all(depends_on("proxy").get(name) == "service_healthy" for name in API_SERVICES)


def test_the_proxy_passes_uploads_long_waits_and_the_client_address() -> None:
    site = proxy_site()
    defaults = Settings.model_fields
    upload_limit = int(defaults["max_upload_bytes"].default) + UPLOAD_FORM_ALLOWANCE
    (size,) = setting(site, "client_max_body_size")
    assert nginx_size(size) == 0 or nginx_size(size) >= upload_limit, size
    (timeout,) = setting(site, "proxy_read_timeout")
    assert nginx_seconds(timeout) > float(defaults["job_wait_s"].default), timeout
    # The failed-login limits count per client address: the replicas must see the client's,
    # taken from a header the proxy overwrites (a client's own X-Forwarded-For is dropped).
    headers = {
        directive.args[0].lower(): directive.args[1:]
        for directive in find(site.location.block, "proxy_set_header")
    }
    assert headers.get("x-forwarded-for") == ("$remote_addr",), headers
    for name in API_SERVICES:
        assert environment(name).get("FORWARDED_ALLOW_IPS"), f"{name} ignores X-Forwarded-For"


def test_workers_run_dpmine_server_worker_once_the_api_is_healthy() -> None:
    # `command:` replaces the image's CMD only while the image has no ENTRYPOINT.
    assert not re.search(r"^\s*ENTRYPOINT\b", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    for name in WORKER_SERVICES:
        assert command(name)[:2] == ["dpmine-server", "worker"], command(name)
        assert "DPMINE_JOB_WORKERS" not in environment(name)
        healthy = {
            dep for dep, condition in depends_on(name).items() if condition == "service_healthy"
        }
        assert healthy & set(API_SERVICES), f"{name} must wait for a healthy (migrated) API"
        # The image's health check probes HTTP, which a worker does not serve.
        check = healthcheck(name)
        assert check.get("disable") is True or check.get("test") == ["NONE"], check


def test_no_secret_is_written_in_the_compose_file() -> None:
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    references = list(variable_references(text))
    assert {variable for variable, _ in references} == REQUIRED_VARIABLES, references
    for variable, modifier in references:
        assert REQUIRED_MODIFIER.fullmatch(modifier), f"${{{variable}{modifier}}}: use :?message"
    for name in services():
        for key, value in environment(name).items():
            if SECRET_NAME.search(key):
                assert re.fullmatch(rf"\$\{{{key}:\?[^}}]+\}}", value), f"{name}.{key}: {value!r}"
        url = environment(name).get("DPMINE_DATABASE_URL")
        if url is not None:
            match = DATABASE_URL.fullmatch(url)
            assert match is not None, url
            assert match["password"].startswith("${POSTGRES_PASSWORD:?"), url


def test_the_readme_names_what_the_operator_sets() -> None:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## Deployment shapes\n(?P<body>.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match is not None, "README.md has no 'Deployment shapes' section"
    body = match["body"]
    for variable in sorted(REQUIRED_VARIABLES):
        assert variable in body, f"the README does not say to set {variable}"
    assert "docker compose up" in body
