"""Where a lake is: its catalog and data path (`LakeLocation`), object-store settings, and the
errors that say why a lake cannot be used."""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

log = logging.getLogger("spanscore.lake")


ALIAS = "lake"


# Where DuckLake attaches the lake's catalog database (its own tables, in its specification).
METADATA = f"__ducklake_metadata_{ALIAS}"


class LakeError(Exception):
    """The lake cannot be opened or used; the message says why and what to do."""


class LakeVersionError(LakeError):
    """The lake was written by a newer spanscore, or is not a spanscore lake."""


@dataclass(frozen=True)
class LakeLocation:
    """Where a lake lives: its DuckLake catalog and its data files.

    `spec` is a directory (embedded: `<dir>/catalog.sqlite` + `<dir>/data/`) or a PostgreSQL
    connection string (`postgresql://user@host:5432/db` or `postgres:dbname=db host=...`).
    A PostgreSQL URI may carry parameters of ours: `data_path` (where new data files go;
    required when the lake is created), `lake_schema` (the PostgreSQL schema holding the
    catalog, so that one database can hold several lakes) and the object-store settings
    `s3_endpoint`, `s3_region`, `s3_url_style`, `s3_use_ssl` (see `S3Settings`).
    """

    catalog: str  # the part after "ducklake:"
    data_path: str | None
    metadata_schema: str | None = None
    directory: Path | None = None
    s3: S3Settings | None = None

    @property
    def is_postgres(self) -> bool:
        return self.catalog.startswith("postgres:")

    @classmethod
    def parse(cls, spec: str | os.PathLike[str], data_path: str | None = None) -> LakeLocation:
        text = os.fspath(spec).strip()
        if not text:
            raise LakeError("no lake given: pass --lake DIR or set SPANSCORE_LAKE")
        if text.startswith(("postgresql://", "postgres://")):
            parts = urlsplit(text)
            params = parse_qsl(parts.query, keep_blank_values=True)
            ours = {k: v for k, v in params if k in _OUR_PARAMETERS}
            rest = [(k, v) for k, v in params if k not in ours]
            dsn = urlunsplit(parts._replace(query=urlencode(rest)))
            return cls(
                catalog="postgres:" + dsn,
                data_path=data_path
                or ours.get("data_path")
                or os.environ.get("SPANSCORE_DATA_PATH"),
                metadata_schema=ours.get("lake_schema"),
                s3=S3Settings.from_environment(ours),
            )
        if text.startswith("postgres:"):
            return cls(
                catalog=text,
                data_path=data_path or os.environ.get("SPANSCORE_DATA_PATH"),
                s3=S3Settings.from_environment({}),
            )
        directory = Path(text).expanduser().resolve()
        if directory.is_file():
            hint = (
                f"use --lake {directory.parent}"
                if directory.name == "catalog.sqlite"
                else "give the lake's directory (it holds catalog.sqlite and data/)"
            )
            raise LakeError(f"--lake {text} is a file, not a lake directory: {hint}")
        return cls(
            catalog=f"sqlite:{directory / 'catalog.sqlite'}",
            data_path=data_path or str(directory / "data") + os.sep,
            directory=directory,
            s3=S3Settings.from_environment({}),  # for data given to object storage
        )

    def describe(self) -> str:
        """A printable name with no password in it."""
        if self.directory is not None:
            return str(self.directory)
        parts = urlsplit(self.catalog.removeprefix("postgres:"))
        if parts.password:
            netloc = parts.netloc.replace(":" + parts.password + "@", ":***@")
            return "postgres:" + urlunsplit(parts._replace(netloc=netloc))
        return self.catalog


_OUR_PARAMETERS = (
    "data_path",
    "lake_schema",
    "s3_endpoint",
    "s3_region",
    "s3_url_style",
    "s3_use_ssl",
)


# Where object-store data paths start; a lake whose data is there needs httpfs.
REMOTE_SCHEMES = ("s3://", "s3a://", "s3n://", "r2://", "gcs://", "gs://", "https://", "http://")


@dataclass(frozen=True)
class S3Settings:
    """How DuckDB reaches S3-compatible object storage for a lake's data files.

    Each setting comes from the lake URI's parameter (`s3_endpoint=...`), else the environment
    variable `SPANSCORE_S3_<NAME>`, else the usual AWS variable:

    - `endpoint`: `host:port` or a URL of an S3-compatible server (`AWS_ENDPOINT_URL_S3`,
      `AWS_ENDPOINT_URL`); a URL's scheme sets `use_ssl`. Unset: AWS S3.
    - `region`: `AWS_REGION`, `AWS_DEFAULT_REGION`.
    - `url_style`: `vhost` (AWS's default) or `path` (most self-hosted servers). Unset, an
      endpoint that is an IP address or `localhost` is reached path-style, as the AWS SDKs and
      CLI reach it (a bucket cannot be a subdomain of an IP address); any other, vhost.
    - `use_ssl`: `true` unless the endpoint URL is `http://` or this says `false`.

    Credentials come only from the environment, never from the URI: `AWS_ACCESS_KEY_ID`,
    `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`). Without them spanscore creates no secret
    of its own, and DuckDB uses a persistent secret of yours (`CREATE PERSISTENT SECRET ...
    (TYPE s3, ...)`) or, with settings given, the AWS credential chain (profiles, instance
    roles).
    """

    endpoint: str | None = None
    region: str | None = None
    url_style: str | None = None
    use_ssl: bool | None = None
    key_id: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_environment(
        cls, parameters: dict[str, str], environ: dict[str, str] | None = None
    ) -> S3Settings:
        env = os.environ if environ is None else environ

        def pick(name: str, *aws: str) -> str | None:
            for value in (
                parameters.get(f"s3_{name}"),
                env.get(f"SPANSCORE_S3_{name.upper()}"),
                *(env.get(a) for a in aws),
            ):
                if value:
                    return value.strip()
            return None

        endpoint = pick("endpoint", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
        use_ssl_text = pick("use_ssl")
        use_ssl: bool | None = None
        if endpoint and "://" in endpoint:
            scheme, _, rest = endpoint.partition("://")
            use_ssl = scheme.lower() == "https"
            endpoint = rest.rstrip("/")
        if use_ssl_text is not None:
            use_ssl = use_ssl_text.lower() in ("1", "true", "yes", "on")
        url_style = pick("url_style")
        if url_style is not None and url_style not in ("path", "vhost"):
            raise LakeError(f"s3_url_style must be 'path' or 'vhost', not {url_style!r}")
        if url_style is None and endpoint is not None and _addressed_by_ip(endpoint):
            url_style = "path"
        return cls(
            endpoint=endpoint,
            region=pick("region", "AWS_REGION", "AWS_DEFAULT_REGION"),
            url_style=url_style,
            use_ssl=use_ssl,
            key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            secret=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
        )

    @property
    def configured(self) -> bool:
        return any(
            v is not None for v in (self.endpoint, self.region, self.url_style, self.use_ssl)
        ) or bool(self.key_id)

    def secret_sql(self) -> str | None:
        """The `CREATE SECRET` statement for these settings (holds credentials: never log it)."""
        if not self.configured:
            return None
        options = ["TYPE s3"]
        if self.key_id:
            options += ["PROVIDER config", f"KEY_ID {sql_string(self.key_id)}"]
            options.append(f"SECRET {sql_string(self.secret or '')}")
            if self.session_token:
                options.append(f"SESSION_TOKEN {sql_string(self.session_token)}")
        else:
            options.append("PROVIDER credential_chain")
        if self.endpoint:
            options.append(f"ENDPOINT {sql_string(self.endpoint)}")
        if self.region:
            options.append(f"REGION {sql_string(self.region)}")
        if self.url_style:
            options.append(f"URL_STYLE {sql_string(self.url_style)}")
        if self.use_ssl is not None:
            options.append(f"USE_SSL {'true' if self.use_ssl else 'false'}")
        return f"CREATE OR REPLACE SECRET spanscore_s3 ({', '.join(options)})"


def _addressed_by_ip(endpoint: str) -> bool:
    """Whether `host[:port]` names an IP address or localhost, where no bucket subdomain can
    resolve."""
    host = endpoint.rsplit("@", 1)[-1]
    if host.startswith("["):  # [IPv6]:port
        host = host[1 : host.find("]")]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    host = host.split("/", 1)[0]
    if host.lower() == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def sql_string(value: str) -> str:
    """`value` as an SQL string literal (for the places a parameter cannot go: paths in
    `COPY`, `ATTACH` options, table functions' arguments)."""
    return "'" + value.replace("'", "''") + "'"
