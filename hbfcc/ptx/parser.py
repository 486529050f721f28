"""PTX lexer + parser: text -> :class:`hbfcc.ptx.model.Module`.

Built for what nvcc 13 and Triton 3.6 emit, and fast: a chunking regex walks the text once
(statements, comments, braces, whitespace), statements are parsed with compiled regexes, and
context-free operands are memoised. Errors are :class:`hbfcommon.errors.PtxError` with ``line``,
``column`` and ``file``.

Accepted: comments (``//``, ``/* */``) anywhere between statements; several statements per line;
statements over several lines; labels (``$L__BB0_1:``, ``waitLoop:``) alone or before a statement;
``{ ... }`` nested blocks with local labels and ``.reg`` names; guards ``@%p`` / ``@!%p``; any modifier
order; spaced operands (``[ %rd2 + 0 ]``, ``{ %r5, %r6 }``); ``_`` sinks; ``p|q``; ``!p``; call
argument lists; ``.param`` aggregates; ``.extern .shared``; ``.section`` bodies (kept raw);
``.loc``/``.file``/``.pragma`` and any other directive (kept as tokens).

Input is UTF-8 text: :func:`parse_module` takes ``str`` or ``bytes``; bytes that are not UTF-8, and
NUL characters (ptxas reads NUL as the end of the file), are refused with a PtxError naming the line,
column and byte offset of the first bad byte. :func:`read_ptx` reads a file the same way (and is how
every hbfcc entry point reads PTX). Braces, quotes and ``//`` inside comments and string literals do
not count as structure anywhere, including ``.section`` bodies and ``{ }`` initializers.
"""
from __future__ import annotations

import os
import re
import stat
from typing import Optional, Union

from hbfcommon.errors import ConfigError, PtxError

from .model import (
    Address, ArgList, Block, Comment, Declarator, Directive, Function, Guard, Immediate, Instruction,
    Label, LabelRef, Module, Negated, Param, PredPair, Register, Sink, Symbol, Vector, VarDecl,
)

__all__ = ["parse_module", "parse_instruction", "as_text", "decode_ptx", "read_ptx", "clear_caches", "PtxError"]

# ---------------------------------------------------------------------------------------------
# Chunking
# ---------------------------------------------------------------------------------------------
# One match per chunk. `stmt` is the fast path: a whole statement on one line without comments or
# strings (it may contain `{...}` vector groups). Everything else is assembled from `txt` pieces.
_CHUNK = re.compile(
    r"[ \t\r\n\f\v]*(?:"
    r"(?P<stmt>[^;{}/\"\s][^;{}/\"\n]*(?:\{[^;{}/\"\n]*\}[^;{}/\"\n]*)*;)"
    r"|(?P<txt>(?:[^;{}/\"\n]|/(?![/*])|\"(?:[^\"\\\n]|\\.)*\")+)"
    r"|(?P<lc>//[^\n]*)"
    r"|(?P<semi>;)"
    r"|(?P<lb>\{)"
    r"|(?P<rb>\})"
    r"|(?P<bc>/\*(?:[^*]|\*(?!/))*\*/)"
    r"|(?P<eof>\Z)"
    r"|(?P<bad>[\s\S]))"
)
_LOC_FAST = re.compile(r"\.loc[ \t]+(\d+)[ \t]+(\d+)[ \t]+(\d+)[ \t]*\Z")

_LINE_DIRECTIVE = re.compile(r"\.(?:loc|file|version|target|address_size)(?![\w$])")
_LABEL = re.compile(r"([A-Za-z_$%][\w$]*)\s*:(?!:)\s*")
_HEADER = re.compile(r"\s*(?:\.(?:extern|visible|weak|common)\s+)*\.(?:entry|func)(?![\w$])")
# names that a generic Directive may not take (they are structure, parsed elsewhere)
# (.section has a { } body: one ended by ';' is refused, else it would print as a body-less .section
# that does not parse back)
_RESERVED = frozenset({"entry", "func", "version", "target", "address_size", "reg", "local", "shared",
                       "global", "const", "param", "tex", "sreg", "extern", "visible", "weak", "common",
                       "section"})

# ---------------------------------------------------------------------------------------------
# Instructions and operands
# ---------------------------------------------------------------------------------------------
_INSN = re.compile(
    r"(?:@\s*(!)?\s*(%?[A-Za-z_$][\w$]*(?:\.[\w$]+)?)\s+)?"   # guard
    r"([A-Za-z_][\w$]*)"                                    # opcode
    r"((?:\.[\w$]+(?:::[\w$]+)*)*)"                         # modifiers
    r"(?:\s+|(?=[{\[(])|\Z)"
    r"([\s\S]*)\Z"
)
_IDENT = re.compile(r"[A-Za-z_$][\w$]*\Z")
_REG = re.compile(r"%[\w$]+(?:\.[\w$]+)?\Z")
_IMM = re.compile(
    r"[-+]?(?:0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|0[xX][0-9a-fA-F]+[uU]?|0[bB][01]+[uU]?"
    r"|\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|(?:0[0-7]*|[1-9]\d*)[uU]?)\Z")
# integers as PTX writes them: hex, binary, octal (leading 0), decimal
_INT = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9]\d*)[uU]?\Z")


def _ival(t: str) -> int:
    """Value of an integer token already checked with _INT."""
    return int(Immediate(t).value)
_ADDR_OFF = re.compile(r"([^+\-]*?)\s*([+-])\s*(.+)\Z", re.S)

_BRANCH_OPS = frozenset({"bra", "brx"})
_MAX_DEPTH = 256   # nested { } blocks; deeper input is refused (keeps walkers off the recursion limit)

_SINK = Sink()
_op_cache: dict[str, object] = {}
_mod_cache: dict[str, tuple[str, ...]] = {"": ()}

# ---------------------------------------------------------------------------------------------
# Directive / declaration tokens
# ---------------------------------------------------------------------------------------------
_TOK = re.compile(
    r"\s*(?:(\"(?:[^\"\\\n]|\\.)*\")"
    r"|(\.[\w$]+(?:::[\w$]+)*)"
    r"|(%?[A-Za-z_$][\w$]*(?:\.[\w$]+)?)"
    r"|([-+]?(?:0[fFdD][0-9a-fA-F]+|0[xX][0-9a-fA-F]+[uU]?|\d+\.\d*(?:[eE][-+]?\d+)?|\d+[uU]?))"
    r"|(\S))")

_SPACES = frozenset({".reg", ".local", ".shared", ".global", ".const", ".param", ".tex", ".sreg"})
_LINKAGE = frozenset({".extern", ".visible", ".weak", ".common"})
_PTR_SPACES = frozenset({".global", ".shared", ".const", ".local"})


def _tokens(s: str, err) -> list[str]:
    out = []
    pos = 0
    n = len(s)
    m = _TOK.match
    while pos < n:
        mm = m(s, pos)
        if mm is None:
            break  # only trailing whitespace is left
        t = mm.group(mm.lastindex)
        if t is None:
            break
        out.append(t)
        pos = mm.end()
    if s[pos:].strip():
        raise err(f"cannot tokenize {s[pos:pos + 20]!r}")
    return out


class _Ctx:
    """Per-parse state: text, file name, position -> line/column, register scopes."""

    __slots__ = ("text", "file", "scopes")

    def __init__(self, text: str, file: str):
        self.text = text
        self.file = file
        self.scopes: list[set[str]] = []

    def col(self, pos: int) -> int:
        return pos - (self.text.rfind("\n", 0, pos) + 1) + 1

    def error(self, msg: str, line: int, pos: int) -> PtxError:
        col = self.col(pos) if pos >= 0 else 0
        return PtxError(f"{self.file}:{line}:{col}: {msg}", line=line, column=col, file=self.file)

    def is_reg(self, name: str) -> bool:
        for s in self.scopes:
            if name in s:
                return True
        return False


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------

def clear_caches() -> None:
    """Forget memoised operands/modifiers (benchmarks measure cold parses with this)."""
    _op_cache.clear()
    _mod_cache.clear()
    _mod_cache[""] = ()


def parse_module(text: Union[str, bytes], filename: str = "<ptx>") -> Module:
    """Parse PTX text (``str``, or ``bytes`` that must be UTF-8). Raises PtxError(line=, column=)
    on malformed input, including bytes that are not UTF-8 and NUL characters."""
    return _Parser(as_text(text, filename), filename).run()


def as_text(text: Union[str, bytes], filename: str = "<ptx>") -> str:
    """The PTX text of ``text``: bytes decoded with :func:`decode_ptx`, a str checked the same way
    (no NUL, no lone surrogates); anything else is a PtxError."""
    if isinstance(text, str):
        _check_text(text, filename)
        return text
    if isinstance(text, (bytes, bytearray, memoryview)):
        return decode_ptx(bytes(text), filename)
    raise PtxError(f"{filename}: PTX text must be str or bytes, not {type(text).__name__}",
                   file=filename, line=0, column=0)


def decode_ptx(data: bytes, filename: str = "<ptx>") -> str:
    """PTX bytes -> text. Refuses (PtxError with ``line``, ``column``, ``offset``) bytes that are not
    UTF-8 and NUL characters, naming the first bad byte; never a UnicodeDecodeError."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = e.start
        line = data.count(b"\n", 0, bad) + 1
        lstart = data.rfind(b"\n", 0, bad) + 1
        col = len(data[lstart:bad].decode("utf-8", "replace")) + 1
        raise PtxError(f"{filename}:{line}:{col}: not UTF-8 text: byte 0x{data[bad]:02x} at byte offset {bad} "
                       f"({e.reason}); PTX is ASCII/UTF-8 text", line=line, column=col, offset=bad,
                       file=filename) from None
    _check_text(text, filename)
    return text


def _check_text(text: str, filename: str) -> None:
    """Refuse NUL (ptxas stops reading there) and lone surrogates (text that cannot be UTF-8)."""
    bad = text.find("\x00")
    what = "a NUL character (ptxas reads it as the end of the file)"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            if bad < 0 or e.start < bad:
                bad = e.start
                what = f"a character that is not UTF-8 (U+{ord(text[bad]):04X}, a lone surrogate)"
    if bad < 0:
        return
    line = text.count("\n", 0, bad) + 1
    col = bad - (text.rfind("\n", 0, bad) + 1) + 1
    offset = len(text[:bad].encode("utf-8", "surrogateescape"))
    raise PtxError(f"{filename}:{line}:{col}: {what} at byte offset {offset}", line=line, column=col,
                   offset=offset, file=filename)


def read_ptx(path: Union[str, os.PathLike]) -> str:
    """Read a PTX file as text, the one way every hbfcc entry point does: bytes, strict UTF-8
    (:func:`decode_ptx`), newlines as :meth:`pathlib.Path.read_text` gives them (``\\r\\n`` and
    ``\\r`` -> ``\\n``). A file that cannot be read or is not a regular file (a FIFO would block) is a
    ConfigError naming it; text that is not UTF-8 is a PtxError with line/column/offset."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ConfigError(f"cannot read PTX input {name}: {e.strerror or e}", file=name) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"PTX input {name} is not a regular file", file=name)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read PTX input {name}: {e.strerror or e}", file=name) from None
    finally:
        os.close(fd)
    text = decode_ptx(data, name)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def parse_instruction(text: str, plain_registers: frozenset[str] = frozenset()) -> Instruction:
    """Parse one instruction (with or without the trailing ';'). ``plain_registers`` names
    non-% registers (declared with .reg inside inline asm) that should parse as Register."""
    ctx = _Ctx(text, "<insn>")
    ctx.scopes.append(set(plain_registers))
    t = text.strip()
    if t.endswith(";"):
        t = t[:-1]
    return _parse_insn(t, ctx, 1, 0)


# ---------------------------------------------------------------------------------------------
# Statement level
# ---------------------------------------------------------------------------------------------

class _Parser:
    def __init__(self, text: str, filename: str):
        self.ctx = _Ctx(text, filename)
        self.text = text

    def run(self) -> Module:  # noqa: C901  (one flat loop for speed)
        text = self.text
        ctx = self.ctx
        n = len(text)
        match = _CHUNK.match
        pos = 0
        line = 1
        pending: list[str] = []       # pieces of the statement being assembled
        p_line = 0                    # line of its first piece
        p_pos = 0
        # containers: stack of lists; [0] is the top level
        top: list = []
        stack: list[list] = [top]
        block_lines: list[int] = []
        func_hdr: Optional[tuple] = None   # header of the function whose body is open
        header: dict = {}
        header_comments: list[Comment] = []
        seen_version = False

        def flush_statement(stmt_text: str, sline: int, spos: int) -> None:
            nonlocal seen_version
            cur = stack[-1]
            # labels (possibly several) before the statement
            while ":" in stmt_text:
                lm = _LABEL.match(stmt_text)
                if lm is None:
                    break
                if len(stack) == 1:
                    raise ctx.error(f"label {lm.group(1)!r} outside a function body", sline, spos)
                cur.append(Label(lm.group(1), sline))
                stmt_text = stmt_text[lm.end():]
            if not stmt_text:
                return
            c0 = stmt_text[0]
            if c0 == ".":
                if len(stack) == 1:
                    self._top_directive(stmt_text, sline, spos, top, header)
                    if "version" in header:
                        seen_version = True
                else:
                    cur.append(_parse_body_directive(stmt_text, ctx, sline, spos))
            else:
                if len(stack) == 1:
                    raise ctx.error(f"instruction outside a function body: {stmt_text[:40]!r}", sline, spos)
                cur.append(_parse_insn(stmt_text, ctx, sline, spos))

        while pos < n:
            m = match(text, pos)
            kind = m.lastgroup
            start = m.start(kind)
            if start != pos:
                nl = text.count("\n", pos, start)
                if nl:
                    line += nl
            pos = m.end()
            if kind == "stmt":
                s = m.group(kind)
                if not pending and len(stack) > 1 and s[0] != "." and ":" not in s:
                    # the common case: one plain instruction inside a body
                    stack[-1].append(_parse_insn(s[:-1].rstrip(), ctx, line, start))
                    continue
                if pending:
                    pending.append(s[:-1])
                    st = " ".join(pending).strip()
                    pending = []
                    flush_statement(st, p_line, p_pos)
                else:
                    flush_statement(s[:-1].rstrip(), line, start)
            elif kind == "eof":
                break
            elif kind == "lc" or kind == "bc":
                c = m.group(kind)
                cm = Comment(c, line)
                if not seen_version and len(stack) == 1 and not top and not pending:
                    header_comments.append(cm)
                else:
                    stack[-1].append(cm)
                if kind == "bc":
                    line += c.count("\n")
            elif kind == "txt":
                s = m.group(kind)
                if not pending:
                    # a label alone on its line (or before the rest of a statement)
                    lm = _LABEL.match(s)
                    while lm is not None:
                        if len(stack) == 1:
                            raise ctx.error(f"label {lm.group(1)!r} outside a function body", line, start)
                        stack[-1].append(Label(lm.group(1), line))
                        s = s[lm.end():]
                        start += lm.end()
                        lm = _LABEL.match(s)
                    st = s.strip()
                    if not st:
                        continue
                    if st[0] == "." and _LINE_DIRECTIVE.match(st):
                        # .loc/.file/.version/.target/.address_size end at the end of the line
                        lf = _LOC_FAST.match(st)
                        if lf is not None and len(stack) > 1:
                            stack[-1].append(Directive("loc", lf.groups(), None, line))
                        else:
                            flush_statement(st, line, start)
                        continue
                    p_line = line
                    p_pos = start
                pending.append(s)
            elif kind == "semi":
                if pending:
                    st = " ".join(pending).strip()
                    pending = []
                    flush_statement(st, p_line, p_pos)
                # an empty statement `;` is accepted and dropped
            elif kind == "lb":
                if pending:
                    hdr = " ".join(pending).strip()
                    if hdr.startswith(".section"):
                        end = _match_brace(text, pos, ctx, line, ".section body")
                        raw = text[pos:end]
                        toks = _tokens(hdr, lambda msg: ctx.error(msg, p_line, p_pos))
                        if len(stack) != 1:
                            raise ctx.error(".section inside a function", p_line, p_pos)
                        top.append(Directive("section", tuple(toks[1:]), _norm_raw(raw), p_line))
                        line += raw.count("\n")
                        pos = end + 1
                        pending = []
                        continue
                    if _HEADER.match(hdr):
                        if len(stack) != 1:
                            raise ctx.error("function definition inside a function", p_line, p_pos)
                        if not seen_version:
                            raise ctx.error("missing .version before the first function", p_line, p_pos)
                        func_hdr = _parse_func_header(hdr, ctx, p_line, p_pos)
                        pending = []
                        body: list = []
                        stack.append(body)
                        ctx.scopes = [set(p.name for p in func_hdr[4] if p.space == "reg")
                                      | set(p.name for p in func_hdr[3] if p.space == "reg"), set()]
                        block_lines.append(line)
                        continue
                    # `{` inside a statement (vector over lines, initializer): keep it as text
                    end = _match_brace(text, pos, ctx, line, "'{' in a statement")
                    piece = text[start:end + 1]
                    line += piece.count("\n")
                    pending.append(_strip_comments(piece).replace("\n", " "))
                    pos = end + 1
                    continue
                if len(stack) == 1:
                    raise ctx.error("'{' at top level without a function header", line, start)
                if len(stack) > _MAX_DEPTH:
                    raise ctx.error(f"blocks nested deeper than {_MAX_DEPTH}", line, start)
                stack.append([])
                ctx.scopes.append(set())
                block_lines.append(line)
            elif kind == "rb":
                if pending:
                    raise ctx.error(f"missing ';' after {' '.join(pending)[:40]!r}", p_line, p_pos)
                if len(stack) == 1:
                    raise ctx.error("unbalanced '}'", line, start)
                body = stack.pop()
                ctx.scopes.pop()
                bline = block_lines.pop()
                if len(stack) == 1:
                    linkage, kind_, name, rets, params, dirs = func_hdr  # type: ignore[misc]
                    top.append(Function(linkage, kind_, name, rets, params, dirs, tuple(body), bline))
                    func_hdr = None
                    ctx.scopes = []
                else:
                    stack[-1].append(Block(tuple(body), bline))
            else:  # bad
                ch = m.group(kind)
                if ch == '"':
                    raise ctx.error("unterminated string", line, start)
                if ch == "/":
                    raise ctx.error("unterminated /* comment", line, start)
                raise ctx.error(f"unexpected character {ch!r}", line, start)
        if pending:
            raise ctx.error(f"missing ';' after {' '.join(pending)[:40]!r}", p_line, p_pos)
        if len(stack) != 1:
            raise ctx.error("unterminated '{' (end of file inside a function or block)",
                            block_lines[-1] if block_lines else line, -1)
        if "version" not in header:
            raise ctx.error("missing .version", line, -1)
        if "target" not in header:
            raise ctx.error("missing .target", line, -1)
        return Module(header["version"], header["target"], header.get("address_size", 64),
                      tuple(top), tuple(header_comments))

    def _top_directive(self, s: str, line: int, pos: int, top: list, header: dict) -> None:
        ctx = self.ctx

        def err(msg):
            return ctx.error(msg, line, pos)

        toks = _tokens(s, err)
        d = toks[0]
        if d == ".version":
            if len(toks) != 2 or not re.fullmatch(r"\d+\.\d+", toks[1]):
                raise err(f"bad .version {' '.join(toks[1:])!r}")
            if "version" in header:
                raise err("duplicate .version")
            header["version"] = toks[1]
            return
        if "version" not in header:
            raise err(f"{d} before .version")
        if d == ".target":
            vals = tuple(t for t in toks[1:] if t != ",")
            if not vals or any(not _IDENT.match(v) for v in vals):
                raise err(f"bad .target {' '.join(toks[1:])!r}")
            header["target"] = vals
            return
        if d == ".address_size":
            if len(toks) != 2 or toks[1] not in ("32", "64"):
                raise err(f"bad .address_size {' '.join(toks[1:])!r}")
            header["address_size"] = int(toks[1])  # "32" or "64", checked above
            return
        if _HEADER.match(s):
            linkage, kind, name, rets, params, dirs = _parse_func_header(s, ctx, line, pos)
            top.append(Function(linkage, kind, name, rets, params, dirs, None, line))
            return
        if d in _SPACES or d in _LINKAGE:
            top.append(_parse_decl(toks, err, line))
            return
        if d[1:] in _RESERVED or len(d) < 2 or d[0] != ".":
            raise err(f"unexpected {d!r} at top level")
        top.append(Directive(d[1:], tuple(toks[1:]), None, line))


# a run of body text without braces, where comments and string literals are skipped whole (a `{`, `}`
# or `"` inside them is not structure); it stops at `{`, `}`, an unterminated string or `/*`, or the end
_BRACED_RUN = re.compile(r'(?:[^{}"/]+|"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*(?:[^*]|\*(?!/))*\*/|/(?![/*]))*')
_COMMENT_OR_STRING = re.compile(r'("(?:[^"\\\n]|\\.)*")|//[^\n]*|/\*(?:[^*]|\*(?!/))*\*/')


def _match_brace(text: str, pos: int, ctx: _Ctx, line: int, what: str) -> int:
    """Index of the '}' closing the '{' just before ``pos`` (nesting handled; braces inside comments
    and string literals do not count). Raises PtxError at the open brace's ``line`` when there is none."""
    depth = 1
    i = pos
    n = len(text)
    run = _BRACED_RUN.match
    while True:
        j = run(text, i).end()
        if j >= n:
            raise ctx.error(f"unterminated {what} (no closing '}}')", line, pos - 1)
        c = text[j]
        if c == "}":
            depth -= 1
            if depth == 0:
                return j
        elif c == "{":
            depth += 1
            if depth > _MAX_DEPTH:
                raise ctx.error(f"braces nested deeper than {_MAX_DEPTH} in {what}", line, pos - 1)
        elif c == '"':
            raise ctx.error("unterminated string", line + text.count("\n", pos, j), j)
        else:  # '/*' without '*/'
            raise ctx.error("unterminated /* comment", line + text.count("\n", pos, j), j)
        i = j + 1


def _strip_comments(s: str) -> str:
    """``s`` with each comment replaced by a space (string literals kept as they are)."""
    if "/" not in s:
        return s
    return _COMMENT_OR_STRING.sub(lambda m: m.group(1) or " ", s)


def _norm_raw(raw: str) -> str:
    return "\n".join(ln.strip() for ln in raw.split("\n") if ln.strip())


# ---------------------------------------------------------------------------------------------
# Functions, declarations, directives
# ---------------------------------------------------------------------------------------------

def _parse_func_header(s: str, ctx: _Ctx, line: int, pos: int):
    def err(msg):
        return ctx.error(msg, line, pos)

    toks = _tokens(s, err)
    i = 0
    linkage = []
    while i < len(toks) and toks[i] in _LINKAGE:
        linkage.append(toks[i])
        i += 1
    if i >= len(toks) or toks[i] not in (".entry", ".func"):
        raise err("expected .entry or .func")
    kind = toks[i][1:]
    i += 1
    rets: tuple = ()
    if i < len(toks) and toks[i] == "(":
        if kind == "entry":
            raise err(".entry cannot have return parameters")
        rets, i = _parse_param_list(toks, i, err)
    if i >= len(toks) or not _IDENT.match(toks[i]):
        raise err("expected a function name")
    name = toks[i]
    i += 1
    params: tuple = ()
    if i < len(toks) and toks[i] == "(":
        params, i = _parse_param_list(toks, i, err)
    dirs = []
    while i < len(toks):
        t = toks[i]
        if not t.startswith(".") or len(t) < 2:
            raise err(f"unexpected {t!r} in function header")
        j = i + 1
        while j < len(toks) and not (toks[j].startswith(".") and len(toks[j]) > 1
                                     and not _IMM.match(toks[j])):
            j += 1
        dirs.append(Directive(t[1:], tuple(toks[i + 1:j]), None, line))
        i = j
    return tuple(linkage), kind, name, rets, params, tuple(dirs)


def _parse_param_list(toks: list[str], i: int, err):
    assert toks[i] == "("
    i += 1
    out = []
    cur: list[str] = []
    while True:
        if i >= len(toks):
            raise err("unterminated parameter list")
        t = toks[i]
        if t == ")" or t == ",":
            if cur:
                out.append(_parse_param(cur, err))
            elif t == "," or out:
                raise err("empty parameter")
            cur = []
            i += 1
            if t == ")":
                return tuple(out), i
            continue
        cur.append(t)
        i += 1


def _parse_param(toks: list[str], err) -> Param:
    if toks[0] not in (".param", ".reg"):
        raise err(f"parameter must start with .param or .reg, got {toks[0]!r}")
    space = toks[0][1:]
    align = None
    ptr_space = None
    ptr_align = None
    typ = None
    i = 1
    while i < len(toks) and toks[i].startswith("."):
        t = toks[i]
        if t == ".align":
            if i + 1 >= len(toks) or not _INT.match(toks[i + 1]):
                raise err("expected a number after .align")
            v = _ival(toks[i + 1])
            if ptr_space is not None:
                ptr_align = v
            else:
                align = v
            i += 2
            continue
        if t == ".ptr":
            ptr_space = ""
        elif ptr_space == "" and t in _PTR_SPACES:
            ptr_space = t[1:]
        else:
            if typ is not None:
                raise err(f"two types in parameter: {typ} and {t}")
            typ = t
        i += 1
    if typ is None:
        raise err("parameter without a type")
    if i >= len(toks) or not _IDENT.match(toks[i]):
        raise err("expected a parameter name")
    name = toks[i]
    dims, i = _array_dims(toks, i + 1, err)
    if i < len(toks):
        raise err(f"unexpected {toks[i]!r} in parameter")
    return Param(space, typ, name, align, tuple(dims), ptr_space, ptr_align)


def _array_dims(toks: list[str], i: int, err) -> tuple[list, int]:
    """``[N]`` / ``[]`` dimensions from ``toks[i]`` on: (dims, index after them)."""
    dims: list = []
    while i < len(toks) and toks[i] == "[":
        if i + 1 < len(toks) and toks[i + 1] == "]":
            dims.append(None)
            i += 2
            continue
        if i + 2 >= len(toks) or not _INT.match(toks[i + 1]) or toks[i + 2] != "]":
            raise err("bad array dimension")
        dims.append(_ival(toks[i + 1]))
        i += 3
    return dims, i


def _parse_decl(toks: list[str], err, line: int) -> VarDecl:
    i = 0
    linkage = []
    while i < len(toks) and toks[i] in _LINKAGE:
        linkage.append(toks[i])
        i += 1
    if i >= len(toks) or toks[i] not in _SPACES:
        raise err("expected a state space (.reg/.shared/.global/...)")
    space = toks[i][1:]
    i += 1
    attrs = []
    dots = []
    while i < len(toks) and toks[i].startswith(".") and len(toks[i]) > 1 and not _IMM.match(toks[i]):
        t = toks[i]
        if t == ".align":
            if i + 1 >= len(toks) or not _INT.match(toks[i + 1]):
                raise err("expected a number after .align")
            attrs.append(f".align {_ival(toks[i + 1])}")
            i += 2
            continue
        if t == ".attribute":
            # .attribute(.managed)
            j = i + 1
            depth = 0
            while j < len(toks):
                depth += toks[j] == "("
                depth -= toks[j] == ")"
                j += 1
                if depth == 0:
                    break
            attrs.append(".attribute" + "".join(toks[i + 1:j]))
            i = j
            continue
        dots.append(t)
        i += 1
    if not dots:
        raise err("declaration without a type")
    typ = dots[-1]
    attrs.extend(dots[:-1])
    # declarators
    decls = []
    while True:
        if i >= len(toks) or not _IDENT.match(toks[i]) and not _REG.match(toks[i]):
            raise err("expected a name in declaration")
        name = toks[i]
        i += 1
        count = None
        init = None
        if i < len(toks) and toks[i] == "<":
            if i + 2 >= len(toks) or not _INT.match(toks[i + 1]) or toks[i + 2] != ">":
                raise err("bad register range <N>")
            count = _ival(toks[i + 1])
            i += 3
        dims, i = _array_dims(toks, i, err)
        if i < len(toks) and toks[i] == "=":
            j = i + 1
            depth = 0
            while j < len(toks):
                t = toks[j]
                if t in "{(":
                    depth += 1
                elif t in "})":
                    depth -= 1
                elif t == "," and depth == 0:
                    break
                j += 1
            if j == i + 1 or depth != 0:
                raise err("bad initializer")
            init = tuple(toks[i + 1:j])
            i = j
        decls.append(Declarator(name, count, tuple(dims), init))
        if i >= len(toks):
            break
        if toks[i] != ",":
            raise err(f"unexpected {toks[i]!r} in declaration")
        i += 1
    return VarDecl(tuple(linkage), space, tuple(attrs), typ, tuple(decls), line)


def _parse_body_directive(s: str, ctx: _Ctx, line: int, pos: int):
    def err(msg):
        return ctx.error(msg, line, pos)

    toks = _tokens(s, err)
    d = toks[0]
    if d in _SPACES or d in _LINKAGE:
        decl = _parse_decl(toks, err, line)
        if decl.space == "reg":
            scope = ctx.scopes[-1] if ctx.scopes else None
            if scope is not None:
                for dc in decl.decls:
                    if not dc.name.startswith("%"):
                        scope.add(dc.name)
        return decl
    if len(d) < 2 or d[0] != "." or d[1:] in _RESERVED:
        raise err(f"unexpected directive {d!r} in a function body")
    return Directive(d[1:], tuple(toks[1:]), None, line)


# ---------------------------------------------------------------------------------------------
# Instructions
# ---------------------------------------------------------------------------------------------

def _parse_insn(s: str, ctx: _Ctx, line: int, pos: int) -> Instruction:
    m = _INSN.match(s)
    if m is None:
        raise ctx.error(f"cannot parse instruction {s[:60]!r}", line, pos)
    neg, greg, opcode, mods, rest = m.groups()
    guard = None
    if greg is not None:
        if not (greg[0] == "%" or ctx.is_reg(greg)):
            # `@name` must be a predicate register; accept undeclared plain names as registers
            # only when they look like registers (ptxas reports undeclared ones itself).
            pass
        guard = Guard(Register(greg), neg is not None)
    mt = _mod_cache.get(mods)
    if mt is None:
        mt = tuple(mods[1:].split("."))
        if len(_mod_cache) < 50000:
            _mod_cache[mods] = mt
    rest = rest.strip()
    if rest:
        ops = _parse_operands(rest, ctx, opcode in _BRANCH_OPS, line, pos)
    else:
        ops = ()
    return Instruction(guard, opcode, mt, ops, line)


_TOP_PART = re.compile(r"(?:\[[^\[\]{}()]*(?:\{[^\[\]{}()]*\}[^\[\]{}()]*)?\]|\{[^\[\]{}()]*\}|\([^\[\]{}()]*\)|[^,\[\]{}()])*")


def _split_top(s: str, ctx: _Ctx, line: int, pos: int) -> list[str]:
    # fast path: one regex for the usual one-level forms ([..], [.., {..}], {..}, (..))
    parts = _TOP_PART.findall(s)
    # findall yields each part followed by an empty match at the separator; keep it only when
    # the parts rebuild the text exactly (otherwise fall back to the checking scanner)
    parts = parts[::2] if len(parts) % 2 == 0 else None  # type: ignore[assignment]
    if parts is not None and ",".join(parts) == s:
        return parts
    return _split_top_slow(s, ctx, line, pos)


def _split_top_slow(s: str, ctx: _Ctx, line: int, pos: int) -> list[str]:
    parts = []
    depth = 0
    last = 0
    for i, ch in enumerate(s):
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
            if depth < 0:
                raise ctx.error(f"unbalanced {ch!r} in operands", line, pos)
        elif ch == "," and depth == 0:
            parts.append(s[last:i])
            last = i + 1
    if depth != 0:
        raise ctx.error("unbalanced brackets in operands", line, pos)
    parts.append(s[last:])
    return parts


def _parse_operands(s: str, ctx: _Ctx, branch: bool, line: int, pos: int) -> tuple:
    if "[" in s or "{" in s or "(" in s:
        parts = _split_top(s, ctx, line, pos)
    else:
        parts = s.split(",")
    cache = _op_cache
    out = []
    for p in parts:
        p = p.strip()
        op = cache.get(p)
        if op is None:
            op, cacheable = _operand(p, ctx, branch, line, pos)
            if cacheable and len(cache) < 200000:
                cache[p] = op
        out.append(op)
    return tuple(out)


def _operand(t: str, ctx: _Ctx, branch: bool, line: int, pos: int):
    """Return (operand, cacheable). Cacheable = independent of scope and instruction context."""
    if not t:
        raise ctx.error("empty operand", line, pos)
    c = t[0]
    if c == "%":
        if _REG.match(t):
            return Register(t), True
        if "|" in t:
            return _pair(t, ctx, line, pos)
        raise ctx.error(f"bad register {t!r}", line, pos)
    if c == "[":
        if t[-1] != "]":
            raise ctx.error(f"bad address {t!r}", line, pos)
        return _address(t[1:-1].strip(), ctx, line, pos)
    if c == "{":
        if t[-1] != "}":
            raise ctx.error(f"bad vector {t!r}", line, pos)
        inner = t[1:-1].strip()
        if not inner:
            raise ctx.error("empty vector", line, pos)
        cacheable = True
        elems = []
        for e in _split_top(inner, ctx, line, pos):
            e = e.strip()
            if e and (e[0] in "[{("):
                raise ctx.error(f"bad vector element {e!r}", line, pos)
            op, ok = _operand(e, ctx, False, line, pos)
            cacheable = cacheable and ok
            elems.append(op)
        return Vector(tuple(elems)), cacheable
    if c == "(":
        if t[-1] != ")":
            raise ctx.error(f"bad argument list {t!r}", line, pos)
        inner = t[1:-1].strip()
        if not inner:
            return ArgList(()), True
        cacheable = True
        items = []
        for e in _split_top(inner, ctx, line, pos):
            op, ok = _operand(e.strip(), ctx, False, line, pos)
            cacheable = cacheable and ok
            items.append(op)
        return ArgList(tuple(items)), cacheable
    if c == "!":
        r = t[1:].strip()
        if _REG.match(r):
            return Negated(Register(r)), True
        if _IDENT.match(r):
            return Negated(Register(r)), False
        raise ctx.error(f"bad negated predicate {t!r}", line, pos)
    if t == "_":
        return _SINK, True
    if "|" in t:
        return _pair(t, ctx, line, pos)
    if _IMM.match(t):
        return Immediate(t), True
    if _IDENT.match(t):
        if branch:
            return LabelRef(t), False
        if ctx.is_reg(t):
            return Register(t), False
        return Symbol(t), False
    raise ctx.error(f"bad operand {t!r}", line, pos)


def _pair(t: str, ctx: _Ctx, line: int, pos: int):
    a, _, b = t.partition("|")
    a, b = a.strip(), b.strip()
    elems = []
    cacheable = True
    for x in (a, b):
        if x == "_":
            elems.append(_SINK)
        elif _REG.match(x):
            elems.append(Register(x))
        elif _IDENT.match(x):
            elems.append(Register(x))
            cacheable = False
        else:
            raise ctx.error(f"bad predicate pair {t!r}", line, pos)
    return PredPair(elems[0], elems[1]), cacheable


def _address(inner: str, ctx: _Ctx, line: int, pos: int):
    coords = None
    cacheable = True
    if "," in inner:
        parts = _split_top(inner, ctx, line, pos)
        if len(parts) != 2:
            raise ctx.error(f"unsupported address form [{inner}]", line, pos)
        inner = parts[0].strip()
        cv = parts[1].strip()
        if not (cv.startswith("{") and cv.endswith("}")):
            raise ctx.error(f"expected a coordinate vector in [{inner}, {cv}]", line, pos)
        coords, ok = _operand(cv, ctx, False, line, pos)
        cacheable = ok
    if not inner:
        raise ctx.error("empty address", line, pos)
    offset = 0
    base_t = inner
    if _INT.match(inner):
        return Address(None, _ival(inner), coords), cacheable
    m = _ADDR_OFF.match(inner)
    if m is not None and m.group(1):
        base_t = m.group(1).strip()
        sign = m.group(2)
        off_t = m.group(3).strip()
        if sign == "-" and off_t.startswith("-"):
            raise ctx.error(f"bad address offset in [{inner}]", line, pos)
        if sign == "-":
            off_t = "-" + off_t
        if not _INT.match(off_t):
            raise ctx.error(f"bad address offset in [{inner}]", line, pos)
        offset = _ival(off_t)
    if _REG.match(base_t):
        return Address(Register(base_t), offset, coords), cacheable
    if _IDENT.match(base_t):
        if ctx.is_reg(base_t):
            return Address(Register(base_t), offset, coords), False
        return Address(Symbol(base_t), offset, coords), False
    raise ctx.error(f"bad address base in [{inner}]", line, pos)
