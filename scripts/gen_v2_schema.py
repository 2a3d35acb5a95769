"""Generate ``crow.acp.schema._generated[_core]`` from the ACP v2 JSON schemas.

    python scripts/gen_v2_schema.py            # rewrite the modules
    python scripts/gen_v2_schema.py --check    # exit 1 if a committed module is stale

Why a generator of our own instead of datamodel-code-generator: its smart unions
demote a malformed *known* variant to the catch-all, it numbers class names, and
its models validate about 8x slower (ECOSYSTEM.md, trap 4).  The ACP schema uses
a handful of regular shapes, and this script maps each onto pydantic directly:

- an object                       -> a model class (``extra="allow"``: unknown
                                     fields round-trip);
- ``anyOf`` of string ``const``s  -> ``Literal[...]``, plus ``| str`` when the
                                     schema has an "other" member (open enum);
- ``anyOf`` of tagged variants    -> a union with a *callable* discriminator:
                                     a known tag validates against its own
                                     model (so a malformed known variant is an
                                     error), an unknown tag lands in
                                     ``Unknown<Name>``, which keeps the payload;
- an object with common fields and tagged variants -> one class per variant
                                     carrying the common fields;
- every non-required field        -> defaults to ``UNSET`` and is left out of
                                     dumps, so omitted, ``null`` and a value
                                     stay three different things (ACP-V2.md §8.1);
- ``x-deserialize-default-on-error`` / ``x-deserialize-skip-invalid-items``
                                  -> lenient validators from ``_lenient``.

The newest revision (``v2-ts2.4.0.schema.json``, from the TS SDK 2.4.0) is the
source.  The spec repository's revision (``v2.schema.json``) is read too: a field
is required only where both revisions require it, and fields only the older
revision has are added, so messages valid under either revision parse (§15-16).

The definitions are split in two modules, for start-up: ``_generated_core`` holds
what ``crow serve`` needs to answer ``initialize`` (``CORE_ROOTS`` and everything
they name) and is imported with the package; ``_generated`` holds the rest and the
method tables, and is imported on the first use of one of its names (the package's
``__getattr__``).  Creating the ~150 other classes costs ~50 ms that a client
waiting for ``initialize`` would otherwise wait for too.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "spec" / "schema"  # copies of shared/spec/schema (see SOURCE.md)
NEWEST = "v2-ts2.4.0.schema.json"
OLDER = "v2.schema.json"
OUT = ROOT / "src" / "crow" / "acp" / "schema" / "_generated.py"
OUT_CORE = ROOT / "src" / "crow" / "acp" / "schema" / "_generated_core.py"

# What ``crow serve`` touches before it has answered ``initialize`` (crow.serve.stdio,
# crow.agent.service, crow.acp.agent, and crow.agent.tooling's START_OPTIONS at import):
# these and all they name go to _generated_core.  Only start-up time depends on this
# list: a name missing here is still found, in _generated, on first use.
CORE_ROOTS = ("InitializeRequest", "InitializeResponse", "PermissionOption")
# The names the generated modules may import, and where from.
HEADER_IMPORTS = (
    ("typing", ("Annotated", "Any", "Literal")),
    ("pydantic", ("Discriminator", "Field", "StrictBool", "StrictInt", "Tag")),
    ("._base", ("UNSET", "UNSET_T", "AcpModel")),
    ("._lenient", ("DEFAULT_ON_ERROR", "SKIP_INVALID_ITEMS", "route")),
)

# Variant classes are named <Tag><Union>; these unions read better with <Tag> alone.
SHORT_VARIANT_NAMES = {"SessionUpdate"}
# Tagged objects whose variants only pin the tag's value: one class, open tag.
FLATTEN = {"IdleStateUpdate"}
# Envelope unions: the JSON-RPC peer handles envelopes itself.
SKIP = {
    "AgentRequest",
    "AgentResponse",
    "AgentNotification",
    "ClientRequest",
    "ClientResponse",
    "ClientNotification",
    "ExtRequest",
    "ExtResponse",
    "ExtNotification",
}
# The older revision's commands carry no "type" tag; route a missing tag here.
UNTAGGED_DEFAULT = {"AvailableCommand": "command"}
# Field names that would shadow pydantic's own attributes.
RESERVED = {
    "copy",
    "dict",
    "json",
    "schema",
    "construct",
    "validate",
    "fields",
    "model_config",
    "model_fields",
    "parse_obj",
    "parse_raw",
    "from_orm",
    "update_forward_refs",
    "schema_json",
}

# Strict ints and bools: "2" is not a protocol version and "false" is not false.
PRIMITIVES = {
    "string": "str",
    "integer": "StrictInt",
    "number": "float",
    "boolean": "StrictBool",
    "null": "None",
}


def pascal(tag: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", tag) if p)


def snake(name: str) -> str:
    if name == "_meta":
        return "meta"
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower().lstrip("_")
    if keyword.iskeyword(s) or s in RESERVED:
        s += "_"
    return s


def ref_name(frag: dict[str, Any]) -> str | None:
    if "$ref" in frag:
        return str(frag["$ref"]).rsplit("/", 1)[1]
    all_of = frag.get("allOf")
    if all_of and len(all_of) == 1 and "$ref" in all_of[0]:
        return str(all_of[0]["$ref"]).rsplit("/", 1)[1]
    return None


def doc_line(frag: dict[str, Any]) -> str:
    text = str(frag.get("description", "")).strip().split("\n\n")[0]
    return " ".join(text.split()).replace("\\", "\\\\").replace('"""', "'''")


class Generator:
    def __init__(self, newest: dict[str, Any], older: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = newest["$defs"]
        self.older: dict[str, Any] = older["$defs"]
        text = json.dumps(newest)
        self.ref_counts = {n: text.count(f'"#/$defs/{n}"') for n in self.defs}
        self.aliases: list[tuple[str, str, str]] = []  # (name, expr, doc)
        self.unions: list[tuple[str, str, str]] = []
        self.classes: dict[str, list[str]] = {}  # name -> source lines
        self.class_order: list[str] = []
        self.bases: dict[str, list[str]] = {}
        self.tag_fields: dict[str, tuple[str, str]] = {}  # class -> (key, tag)

    # ---- type expressions -------------------------------------------------
    def type_of(self, frag: dict[str, Any]) -> str:
        name = ref_name(frag)
        if name:
            return name
        if "const" in frag:
            return f"Literal[{frag['const']!r}]"
        if "anyOf" in frag:
            parts = [self.type_of(p) for p in frag["anyOf"]]
            return " | ".join(dict.fromkeys(parts))
        t = frag.get("type")
        if isinstance(t, list):
            return " | ".join(self.type_of({**frag, "type": x}) for x in t)
        if t == "array":
            return f"list[{self.type_of(frag.get('items', {}))}]"
        if t == "object":
            extra = frag.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                return f"dict[str, {self.type_of(extra)}]"
            return "dict[str, Any]"
        if t == "integer" and ("minimum" in frag or "maximum" in frag):
            bounds = ", ".join(
                f"{k}={frag[m]}" for k, m in (("ge", "minimum"), ("le", "maximum")) if m in frag
            )
            return f"Annotated[StrictInt, Field({bounds})]"
        if t in PRIMITIVES:
            return PRIMITIVES[t]
        return "Any"

    # ---- fields -------------------------------------------------------------
    def field_lines(self, props: dict[str, Any], required: set[str]) -> list[str]:
        lines = []
        for key, frag in props.items():
            py = snake(key)
            expr = self.type_of(frag)
            markers = []
            if frag.get("x-deserialize-skip-invalid-items"):
                markers.append("SKIP_INVALID_ITEMS")
            if frag.get("x-deserialize-default-on-error") and key not in required:
                markers.append("DEFAULT_ON_ERROR")
            if markers:
                expr = f"Annotated[{expr}, {', '.join(markers)}]"
            alias = "" if py == key else f'alias="{key}"'
            if key in required:
                default = f" = Field({alias})" if alias else ""
                lines.append(f"    {py}: {expr}{default}")
            else:
                default = f"Field(UNSET, {alias})" if alias else "UNSET"
                lines.append(f"    {py}: {expr} | UNSET_T = {default}")
        return lines

    def own_shape(self, name: str, d: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
        """Properties and required keys, relaxed by the older revision."""
        props = dict(d.get("properties", {}))
        required = set(d.get("required", []))
        old = self.older.get(name)
        if old is not None and "properties" in old:
            required &= set(old.get("required", []))
            for key, frag in old["properties"].items():
                props.setdefault(key, frag)
        for scope in d.get("oneOf", []):  # elicitation scopes: flattened
            sname = ref_name(scope)
            if sname:
                props.update(self.defs[sname].get("properties", {}))
        return props, required

    def emit_class(self, name: str, bases: list[str], doc: str, lines: list[str]) -> None:
        body = [f'    """{doc}"""'] if doc else []
        body += lines
        if not body:
            body = ["    pass"]
        self.classes[name] = body
        self.bases[name] = bases
        self.class_order.append(name)

    # ---- definitions --------------------------------------------------------
    def run(self) -> None:
        for name, d in self.defs.items():
            if name in SKIP:
                continue
            self.definition(name, d)

    def definition(self, name: str, d: dict[str, Any]) -> None:
        doc = doc_line(d)
        if name in FLATTEN:
            return self.flattened(name, d, doc)
        variants = d.get("anyOf") or (d.get("oneOf") if "type" not in d else None)
        if variants and self.is_string_enum(variants):
            return self.string_enum(name, variants, doc)
        if variants and any(self.tag_of(v) for v in variants):
            return self.tagged_union(name, d, variants, doc)
        if "properties" in d or d.get("type") == "object":
            props, required = self.own_shape(name, d)
            return self.emit_class(name, ["AcpModel"], doc, self.field_lines(props, required))
        if variants:
            parts = [self.type_of(v) if v else "Any" for v in variants]
            expr = "Any" if "Any" in parts else " | ".join(parts)
            return self.unions.append((name, expr, doc))
        self.aliases.append((name, self.type_of(d), doc))

    @staticmethod
    def is_string_enum(variants: list[dict[str, Any]]) -> bool:
        return all(
            v.get("type") == "string" and ("const" in v or v.get("title") in ("other", "unknown"))
            for v in variants
        ) or all(v.get("type") == "integer" for v in variants)

    def string_enum(self, name: str, variants: list[dict[str, Any]], doc: str) -> None:
        if variants[0].get("type") == "integer":
            return self.aliases.append((name, "int", doc))
        consts = [v["const"] for v in variants if "const" in v]
        expr = f"Literal[{', '.join(repr(c) for c in consts)}]"
        if len(consts) < len(variants):
            expr += " | str"
        self.aliases.append((name, expr, doc))

    @staticmethod
    def tag_of(v: dict[str, Any]) -> tuple[str, str | None] | None:
        """(key, const) of a tagged variant; const None for the "other" member."""
        for key, frag in v.get("properties", {}).items():
            if key in v.get("required", []) and frag.get("type") == "string":
                if "const" in frag:
                    return key, frag["const"]
                if v.get("title") == "other":
                    return key, None
        return None

    def tagged_union(
        self, name: str, d: dict[str, Any], variants: list[dict[str, Any]], doc: str
    ) -> None:
        common, common_req = self.own_shape(
            name, {k: v for k, v in d.items() if k not in ("anyOf", "oneOf")}
        )
        mixin = None
        if common:
            mixin = f"_{name}Common"
            self.emit_class(mixin, ["AcpModel"], "", self.field_lines(common, common_req))
        members: list[tuple[str | None, str]] = []  # (tag or None=missing, class)
        key = ""
        for v in variants:
            tag = self.tag_of(v)
            if tag is None:  # untagged member: chosen when the tag is absent
                members.append((None, self.type_of(v)))
                continue
            key, const = tag
            if const is None:
                cls = f"Unknown{name}"
                props, req = self.own_shape(cls, v)
                props = {k: f for k, f in props.items() if k != key}
                lines = [
                    f"    {snake(key)}: str"
                    + (f' = Field(alias="{key}")' if snake(key) != key else "")
                ]
                lines += self.field_lines(props, req)
                self.emit_class(
                    cls, [mixin or "AcpModel"], f"An unrecognised {name}, kept whole.", lines
                )
                members.append(("*", cls))
                continue
            members.append((const, self.variant_class(name, v, key, const, mixin)))
        if name in UNTAGGED_DEFAULT:
            members.append((None, dict(members)[UNTAGGED_DEFAULT[name]]))
        self.union_members[name] = [c for _, c in members]
        self.unions.append((name, self.union_expr(name, key, members), doc))

    def variant_class(
        self, union: str, v: dict[str, Any], key: str, const: str, mixin: str | None
    ) -> str:
        base = ref_name(v)
        extra = {k: f for k, f in v.get("properties", {}).items() if k != key}
        extra_req = set(v.get("required", [])) - {key}
        optional_tag = union in UNTAGGED_DEFAULT and UNTAGGED_DEFAULT[union] == const
        tag_line = self.tag_line(key, const, optional_tag)
        if base and "anyOf" in self.defs[base] and "properties" not in self.defs[base]:
            self.nested_tags[base] = tag_line  # a union inside a union: tag its members
            return base
        if base and self.ref_counts.get(base, 0) == 1 and not mixin and not extra:
            self.tag_fields[base] = (key, const)  # the tag goes on the base itself
            self.pending_tags.setdefault(base, tag_line)
            return base
        suffix = "" if union in SHORT_VARIANT_NAMES else union
        cls = pascal(const) + suffix
        if cls in self.defs:
            cls += "Variant"
        bases = [b for b in (mixin, base) if b] or ["AcpModel"]
        self.emit_class(cls, bases, doc_line(v), [tag_line, *self.field_lines(extra, extra_req)])
        return cls

    def tag_line(self, key: str, const: str, optional: bool) -> str:
        alias = f', alias="{key}"' if snake(key) != key else ""
        if optional:  # absent in the older revision: keep it absent on dump
            return f"    {snake(key)}: Literal[{const!r}] | UNSET_T = Field(UNSET{alias})"
        return f"    {snake(key)}: Literal[{const!r}] = Field({const!r}{alias})"

    def union_expr(self, name: str, key: str, members: list[tuple[str | None, str]]) -> str:
        tags = {t: c for t, c in members}
        routes = ", ".join(f"{t!r}: {c!r}" for t, c in tags.items() if t not in (None, "*"))
        parts = [f"Annotated[{c}, Tag({c!r})]" for c in dict.fromkeys(tags.values())]
        fallback = tags.get("*")
        missing = tags.get(None)
        return (
            f"Annotated[\n    {' | '.join(parts)},\n"
            f"    Discriminator(route({key!r}, {snake(key)!r}, {{{routes}}}, "
            f"other={fallback!r}, missing={missing!r})),\n]"
        )

    def flattened(self, name: str, d: dict[str, Any], doc: str) -> None:
        props, required = self.own_shape(name, d)
        for v in d.get("anyOf", []):
            sub = ref_name(v)
            if sub:
                props.update(self.defs[sub].get("properties", {}))
        stop = self.older.get("StopReason", {}).get("anyOf", [])
        known = [v["const"] for v in stop if "const" in v] + ["error"]
        self.aliases.append(
            (
                "StopReason",
                f"Literal[{', '.join(map(repr, known))}] | str",
                "Why foreground work ended (open: unknown reasons are kept).",
            )
        )
        props["stopReason"] = {
            "anyOf": [{"$ref": "#/$defs/StopReason"}, {"type": "null"}],
            "x-deserialize-default-on-error": True,
        }
        self.emit_class(name, ["AcpModel"], doc, self.field_lines(props, required))

    # ---- method tables ------------------------------------------------------
    def methods(self) -> list[str]:
        table: dict[str, dict[str, dict[str, str]]] = {"agent": {}, "client": {}, "protocol": {}}
        for name, d in self.defs.items():
            method, side = d.get("x-method"), d.get("x-side")
            if not method or side not in table:
                continue
            kind = "result" if name.endswith("Response") else "params"
            table[side].setdefault(method, {})[kind] = name
        out = []
        for side, title in (
            ("agent", "AGENT_METHODS"),
            ("client", "CLIENT_METHODS"),
            ("protocol", "PROTOCOL_METHODS"),
        ):
            out.append("# method: (params type, result type, or None for a notification)")
            out.append(f"{title}: dict[str, tuple[Any, Any]] = {{")
            for method, kinds in sorted(table[side].items()):
                out.append(f"    {method!r}: ({kinds['params']}, {kinds.get('result')}),")
            out.append("}")
        return out

    def ordered_definitions(self) -> tuple[list[tuple[str, list[str]]], set[str]]:
        """Every alias, class and union, each after what it names, as (name, lines);
        and the names ``CORE_ROOTS`` need (themselves included).

        A class in a reference cycle gets the offending annotations quoted (pydantic
        resolves them on first use); bases and union members are never cyclic.
        """
        nodes: dict[str, tuple[str, Any]] = {}
        for name, expr, doc in self.aliases:
            nodes[name] = ("alias", (expr, doc))
        for name in self.class_order:
            nodes[name] = ("class", None)
        for name, expr, doc in self.unions:
            nodes[name] = ("union", (expr, doc))
        names = re.compile(r"\b(" + "|".join(sorted(nodes, key=len, reverse=True)) + r")\b")

        def refs(text: str, own: str) -> list[str]:
            return [n for n in dict.fromkeys(names.findall(text)) if n != own]

        def text_of(name: str) -> str:
            kind, data = nodes[name]
            if kind == "class":
                body = self.classes[name]
                fields = [line for line in body if not line.lstrip().startswith('"""')]
                return " ".join(self.bases[name]) + "\n" + "\n".join(fields)
            return str(data[0])

        deps = {name: refs(text_of(name), name) for name in nodes}
        blocks: list[tuple[str, list[str]]] = []
        done: set[str] = set()
        active: set[str] = set()

        def visit(name: str) -> None:
            if name in done or name in active:
                return
            active.add(name)
            for dep in deps[name]:
                visit(dep)
            active.discard(name)
            done.add(name)
            kind, data = nodes[name]
            if kind == "class":
                body = [self.quote_forward(line, done, names) for line in self.classes[name]]
                blocks.append(
                    (name, ["", "", f"class {name}({', '.join(self.bases[name])}):", *body])
                )
            else:
                expr, doc = data
                blocks.append((name, ["", f"{name} = {expr}", *([f'"""{doc}"""'] if doc else [])]))

        for name in nodes:
            visit(name)
        core: set[str] = set()
        stack = list(CORE_ROOTS)
        while stack:
            name = stack.pop()
            if name not in core:
                core.add(name)
                stack.extend(deps[name])
        return blocks, core

    @staticmethod
    def quote_forward(line: str, done: set[str], names: re.Pattern[str]) -> str:
        """Quote a field's annotation if it names something not yet defined."""
        match = re.match(r"^(    \w+): (.+?)( = .*)?$", line)
        if match is None or line.lstrip().startswith('"""'):
            return line
        annotation = match.group(2)
        if all(n in done for n in names.findall(annotation)):
            return line
        return f"{match.group(1)}: {annotation!r}{match.group(3) or ''}"

    # ---- output -------------------------------------------------------------
    def render(self, digest: str) -> tuple[str, str]:
        """The sources of ``_generated_core`` and ``_generated``."""
        self.pending_tags: dict[str, str] = {}
        self.nested_tags: dict[str, str] = {}
        self.union_members: dict[str, list[str]] = {}
        self.run()
        for union, line in self.nested_tags.items():
            for cls in self.union_members[union]:
                self.classes[cls].insert(
                    1 if self.classes[cls][0].lstrip().startswith('"""') else 0, line
                )
        for cls, line in self.pending_tags.items():
            body = self.classes[cls]
            at = 1 if body and body[0].lstrip().startswith('"""') else 0
            body.insert(at, line)
            if body[-1] == "    pass":
                body.pop()
        blocks, core = self.ordered_definitions()
        source = f"spec/schema/{NEWEST} (sha256 {digest[:16]}...)"
        core_body = [line for name, lines in blocks if name in core for line in lines]
        rest_body = [line for name, lines in blocks if name not in core for line in lines]
        rest_body += ["", "", *self.methods()]
        core_out = [
            '"""ACP v2 wire models for initialize. '
            "GENERATED by scripts/gen_v2_schema.py: do not edit.",
            "",
            f"Source: {source},",
            f"relaxed to accept spec/schema/{OLDER} as well.  Imported with",
            "``crow.acp.schema``; the other models are in ``_generated``, imported on first use.",
            '"""',
            "",
            "# mypy: ignore-errors",
            "# ruff: noqa: E501",
            *NO_FUTURE_COMMENT,
            "",
            *header_imports(core_body, everything=False),
            *core_body,
            "",
        ]
        core_names = sorted(core, key=lambda n: (n.lstrip("_").lower(), n))
        rest_out = [
            '"""ACP v2 wire models. GENERATED by scripts/gen_v2_schema.py: do not edit.',
            "",
            f"Source: {source},",
            f"relaxed to accept spec/schema/{OLDER} as well.  The models ``initialize`` needs",
            "are in ``_generated_core``; this module is imported on the first use of a name",
            "it defines (``crow.acp.schema.__getattr__``).",
            '"""',
            "",
            "# ruff: noqa: E501",
            *NO_FUTURE_COMMENT,
            "",
            *header_imports(rest_body, everything=True),
            f"from ._generated_core import {', '.join(core_names)}",
            "",
            "",
            *rest_body,
            "",
        ]
        return "\n".join(core_out), "\n".join(rest_out)


NO_FUTURE_COMMENT = (
    "# No `from __future__ import annotations`: definitions come in dependency order,",
    "# so annotations evaluate at class creation; pydantic would otherwise compile and",
    "# eval every annotation string at import, doubling the start-up cost.",
)


def header_imports(body: list[str], *, everything: bool) -> list[str]:
    """The import lines of a generated module: all of ``HEADER_IMPORTS`` (the module the
    package re-exports wholesale keeps them all), or only those ``body`` uses."""
    text = "\n".join(body)
    out = []
    for module, names in HEADER_IMPORTS:
        used = [n for n in names if everything or re.search(rf"\b{n}\b", text)]
        if used:
            local = module.startswith(".")
            out += [f"from {module} import {', '.join(used)}", *([] if local else [""])]
    return out


def generate() -> dict[Path, str]:
    newest_bytes = (SCHEMA_DIR / NEWEST).read_bytes()
    newest = json.loads(newest_bytes)
    older = json.loads((SCHEMA_DIR / OLDER).read_bytes())
    core, rest = Generator(newest, older).render(hashlib.sha256(newest_bytes).hexdigest())
    return {OUT_CORE: ruff_format(core), OUT: ruff_format(rest)}


def ruff_format(source: str) -> str:
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--quiet", "-"],
        input=source,
        capture_output=True,
        text=True,
        check=True,
    )
    return formatted.stdout


def main() -> int:
    sources = generate()
    if "--check" in sys.argv:
        stale = [path for path, source in sources.items() if read(path) != source]
        for path in stale:
            print(f"{path} is stale: run python scripts/gen_v2_schema.py", file=sys.stderr)
        return 1 if stale else 0
    for path, source in sources.items():
        path.write_text(source)
    return 0


def read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


if __name__ == "__main__":
    raise SystemExit(main())
