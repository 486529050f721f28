"""PTX front end: model (``model``), lexer/parser (``parser``), printer (``printer``), CFG (``cfg``).

    from hbfcc.ptx import parse_module, print_module
    m = parse_module(text, filename="k.ptx")     # raises hbfcommon.errors.PtxError(line=, column=)
    text2 = print_module(m)                      # parse_module(text2) == m
    from hbfcc.ptx.cfg import build_cfg
    cfg = build_cfg(m.function("kern"))          # basic blocks, scoped labels, block_of(path)

``python -m hbfcc.ptx FILE.ptx [--print|--cfg FUNC|--check]`` inspects a file.
Fixtures and their compiler live in tests/fixtures (see tests/fixtures/ptx_corpus.py).
"""
from .model import *  # noqa: F401,F403
from .model import __all__ as _model_all

__all__ = list(_model_all) + ["parse_module", "print_module", "PtxError"]


def __getattr__(name):  # lazy: the parser/printer import the model, not the other way round
    if name == "parse_module":
        from .parser import parse_module
        return parse_module
    if name == "print_module":
        from .printer import print_module
        return print_module
    if name == "PtxError":
        from hbfcommon.errors import PtxError
        return PtxError
    raise AttributeError(name)
