"""Import-time stand-in for NVIDIA Transformer Engine (GPU-only; not installable on CPU).

Why it exists: the Megatron differential suite (test/megatron/) runs the REAL
Megatron-Core 0.16.1 / Megatron-Bridge 0.3.1 configuration and validation code on CPU.
TE needs CUDA to build and load, so it cannot be installed there, but
  * Megatron-Bridge imports ``transformer_engine.pytorch`` unconditionally at module
    level (megatron/bridge/peft/lora_layers.py defines ``class TELinearAdapter(te.Linear)``),
  * Megatron-Core's config checks call ``is_te_min_version(...)`` which reads
    ``transformer_engine.__version__`` (megatron/core/utils.py: get_te_version), and
  * with ``import transformer_engine`` succeeding, Megatron-Core imports a few dozen TE
    names at module level (fp8_utils.py, extensions/transformer_engine.py, ...).
A real training job has TE installed, so the stand-in reports a version inside the range
Megatron-Bridge 0.3.1 pins (transformer-engine >=2.10,<2.13): 2.11.0.

What it is: every ``transformer_engine.<anything>`` module and every attribute of one
resolves to a placeholder CLASS, so imports, subclassing, ``isinstance`` and class
attribute look-ups at import time work. It implements NO TE behaviour: calling or
instantiating any placeholder raises ``RuntimeError`` naming it, so a code path that
would really run TE (building a layer, a kernel, an FP8 support probe) fails loudly in
the suite instead of returning an invented answer. The oracle reports such failures as
"oracle-error", never as a Megatron verdict.

One exception, API metadata only: ``transformer_engine.pytorch.optimizers.FusedAdam``
carries a call signature naming the keyword parameters Megatron-Core inspects
(megatron/core/optimizer/optimizer_config.py:391-405: with use_precision_aware_optimizer it
asserts that TE's FusedAdam accepts master_weight_dtype, exp_avg_dtype, exp_avg_sq_dtype and
use_decoupled_grad). Every TE in Bridge 0.3.1's range has them: Bridge 0.3.1's own
DeepSeek-V3 recipe turns the precision-aware optimizer on by default
(megatron/bridge/recipes/deepseek/deepseek_v3.py:161). Calling it still raises.
"""

import importlib.abc
import importlib.machinery
import inspect
import sys
import types

__version__ = "2.11.0"

# Call signatures of placeholders that Megatron inspects (never implemented; see above).
_P = inspect.Parameter
_SIGNATURES = {
    "transformer_engine.pytorch.optimizers.FusedAdam": inspect.Signature(
        [_P("params", _P.POSITIONAL_OR_KEYWORD)]
        + [_P(n, _P.KEYWORD_ONLY, default=None)
           for n in ("master_weight_dtype", "exp_avg_dtype", "exp_avg_sq_dtype", "use_decoupled_grad")]),
}

_ROOT = __name__


class _PlaceholderMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        sub = _make_placeholder(f"{cls.__qualname__}.{name}", cls.__module__)
        setattr(cls, name, sub)
        return sub

    def __call__(cls, *args, **kwargs):
        raise RuntimeError(
            f"{cls.__module__}.{cls.__qualname__} was called, but transformer_engine is a CPU "
            "import-time stand-in (test/megatron/stubs): TE functionality is not available"
        )


def _make_placeholder(qualname, module):
    import torch  # placeholders subclass nn.Module so TE layer subclasses stay valid classes

    cls = _PlaceholderMeta(qualname.rsplit(".", 1)[-1], (torch.nn.Module,), {"__module__": module})
    cls.__qualname__ = qualname
    return cls


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if full in sys.modules:
            return sys.modules[full]
        value = _make_placeholder(name, self.__name__)
        if full in _SIGNATURES:
            value.__signature__ = _SIGNATURES[full]
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(_ROOT + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _StubModule(spec.name)
        mod.__path__ = []
        mod.__doc__ = "transformer_engine CPU stand-in submodule (test/megatron/stubs)"
        return mod

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        setattr(sys.modules[parent], child, module)


sys.meta_path.insert(0, _Finder())
# Make attribute access on the package itself (te.pytorch, te.common, ...) behave the same.
sys.modules[__name__].__class__ = _StubModule
