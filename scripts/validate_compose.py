#!/usr/bin/env python3
"""Validate a docker-compose file without a Docker engine.

    python3 scripts/validate_compose.py docker-compose.yml

1. JSON-schema validation against the Compose Specification schema
   (scripts/compose-spec.json, copied from github.com/compose-spec/compose-spec),
   the same schema `docker compose config` checks against.
2. Checks the schema cannot express, resolved against the compose file's directory:
   - every service has `image` or `build`; every `build` context exists and holds its Dockerfile;
   - every `depends_on`, `configs`, `secrets`, `networks` and named volume a service names is defined;
   - every `file:` of a top-level config/secret, every bind-mount source and `env_file` exists;
   - every `-f <path>` in a service's command is provided inside the container by one of the
     service's configs or bind mounts, and that source file exists on the host.

Needs PyYAML (`pip install pyyaml`) and jsonschema (`pip install jsonschema`); without them it
prints a warning and skips what it cannot do. Exits 1 with one line per problem otherwise.
"""

from __future__ import annotations

import json
import os
import posixpath
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "compose-spec.json")


def warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def as_list(value) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def names(value) -> list[str]:
    """Names from a list-or-dict field (depends_on, networks)."""
    if isinstance(value, dict):
        return list(value.keys())
    return [v if isinstance(v, str) else v.get("source", "") for v in as_list(value)]


def schema_errors(doc) -> list[str]:
    try:
        import jsonschema
    except ImportError:
        warn("python jsonschema is not installed; skipping the Compose Specification schema check")
        return []
    with open(SCHEMA, encoding="utf-8") as f:
        schema = json.load(f)
    validator = jsonschema.Draft7Validator(schema)
    out = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in err.absolute_path) or "<root>"
        out.append(f"schema: {where}: {err.message}")
    return out


def volume_mounts(service) -> list[tuple[str, str, str]]:
    """(type, source, target) for each entry of `volumes` (short and long syntax)."""
    out = []
    for v in as_list(service.get("volumes")):
        if isinstance(v, dict):
            out.append((v.get("type", "volume"), str(v.get("source", "")), str(v.get("target", ""))))
            continue
        parts = str(v).split(":")
        if len(parts) == 1:
            out.append(("volume", "", parts[0]))
            continue
        source, target = parts[0], parts[1]
        kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        out.append((kind, source, target))
    return out


def config_targets(service, kind: str) -> list[tuple[str, str]]:
    """(source name, target path in the container) for each entry of `configs`/`secrets`."""
    out = []
    for c in as_list(service.get(kind)):
        if isinstance(c, str):
            source, target = c, None
        else:
            source, target = c.get("source", ""), c.get("target")
        if not target:
            target = f"/{source}" if kind == "configs" else f"/run/secrets/{source}"
        elif kind == "secrets" and not target.startswith("/"):
            target = f"/run/secrets/{target}"
        out.append((source, target))
    return out


def command_files(service) -> list[str]:
    cmd = service.get("command")
    if isinstance(cmd, str):
        cmd = cmd.split()
    cmd = [str(c) for c in as_list(cmd)]
    out = []
    for i, arg in enumerate(cmd):
        if arg in ("-f", "--file", "--config") and i + 1 < len(cmd):
            out.append(cmd[i + 1])
        elif arg.startswith(("--file=", "--config=")):
            out.append(arg.split("=", 1)[1])
    return out


def semantic_errors(doc, base: str) -> list[str]:
    errors: list[str] = []
    services = doc.get("services") or {}
    top = {k: (doc.get(k) or {}) for k in ("configs", "secrets", "networks", "volumes")}

    def host_path(p: str) -> str:
        return os.path.normpath(os.path.join(base, os.path.expanduser(p)))

    for kind in ("configs", "secrets"):
        for name, spec in top[kind].items():
            spec = spec or {}
            if "file" in spec and not os.path.isfile(host_path(spec["file"])):
                errors.append(f"{kind}.{name}: file {spec['file']!r} does not exist")

    for name, svc in services.items():
        where = f"services.{name}"
        svc = svc or {}
        if "image" not in svc and "build" not in svc:
            errors.append(f"{where}: needs `image` or `build`")
        build = svc.get("build")
        if build is not None:
            if isinstance(build, str):
                build = {"context": build}
            context = host_path(build.get("context", "."))
            if not os.path.isdir(context):
                errors.append(f"{where}.build: context {build.get('context')!r} is not a directory")
            elif "dockerfile_inline" not in build:
                dockerfile = os.path.join(context, build.get("dockerfile", "Dockerfile"))
                if not os.path.isfile(dockerfile):
                    errors.append(f"{where}.build: Dockerfile {dockerfile!r} does not exist")
        for dep in names(svc.get("depends_on")):
            if dep not in services:
                errors.append(f"{where}.depends_on: unknown service {dep!r}")
        for net in names(svc.get("networks")):
            if net != "default" and net not in top["networks"]:
                errors.append(f"{where}.networks: unknown network {net!r}")
        for env_file in as_list(svc.get("env_file")):
            path = env_file if isinstance(env_file, str) else env_file.get("path", "")
            required = True if isinstance(env_file, str) else env_file.get("required", True)
            if required and not os.path.isfile(host_path(path)):
                errors.append(f"{where}.env_file: {path!r} does not exist")

        # What the container sees at which path, and where it comes from on the host.
        provided: dict[str, str | None] = {}
        for kind in ("configs", "secrets"):
            for source, target in config_targets(svc, kind):
                if source not in top[kind]:
                    errors.append(f"{where}.{kind}: unknown {kind[:-1]} {source!r}")
                    continue
                spec = top[kind][source] or {}
                provided[target] = host_path(spec["file"]) if "file" in spec else None
        for kind, source, target in volume_mounts(svc):
            if kind == "bind":
                if not os.path.exists(host_path(source)):
                    errors.append(f"{where}.volumes: bind source {source!r} does not exist")
                provided[target] = host_path(source)
            elif kind == "volume" and source and source not in top["volumes"]:
                errors.append(f"{where}.volumes: unknown named volume {source!r}")

        for path in command_files(svc):
            host = provided.get(path)
            if host is None:
                # A file inside a mounted directory?
                for target, src in provided.items():
                    if src and path.startswith(target.rstrip("/") + "/"):
                        host = os.path.join(src, posixpath.relpath(path, target))
                        break
            if host is None:
                if path not in provided:
                    errors.append(
                        f"{where}.command: config file {path!r} is not provided by a config or bind mount"
                    )
            elif not os.path.isfile(host):
                errors.append(f"{where}.command: config file {path!r} maps to missing {host!r}")
    return errors


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} docker-compose.yml", file=sys.stderr)
        return 2
    path = argv[1]
    try:
        import yaml
    except ImportError:
        warn("PyYAML is not installed; skipping docker-compose validation")
        return 0
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 1
    if not isinstance(doc, dict):
        print(f"{path}: not a YAML mapping", file=sys.stderr)
        return 1
    base = os.path.dirname(os.path.abspath(path))
    errors = schema_errors(doc) + semantic_errors(doc, base)
    for e in errors:
        print(f"{path}: {e}", file=sys.stderr)
    if errors:
        return 1
    services = ", ".join(doc.get("services") or {})
    print(f"{path}: valid ({services})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
