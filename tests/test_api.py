"""The public face of attnlib: the contract of DESIGN.md, the submodules, the layering rule."""

from __future__ import annotations

import ast
import inspect
import math
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import torch

import attnlib

PACKAGE = Path(attnlib.__file__).parent

# The top level: the contract's names plus the functional core, and nothing else.
CONTRACT = {
    "core": ["KERNELS", "attention", "attention_weights", "similarity", "row_normalise"],
    "masks": ["causal_mask", "key_padding_mask", "sliding_window_mask"],
    "heads": ["split_heads", "merge_heads", "repeat_kv"],
    "rope": ["apply_rope"],
    "gqa": ["GroupedQueryAttention", "MultiHeadAttention", "MultiQueryAttention",
            "grouped_query_attention"],
    "mla": ["MultiHeadLatentAttention", "mla_from_mha", "mla_naive", "mla_absorbed"],
    "attention_layer": ["AttentionLayer"],
    "cache": ["Cache", "KVCache", "LatentCache"],
    "norms": ["LayerNorm", "RMSNorm", "layer_norm", "rms_norm"],
    "layers": ["FeedForward", "TransformerBlock", "TinyDecoder", "feed_forward"],
    "memory": ["ModelSpec", "kv_cache_bytes", "mla_cache_bytes", "LLAMA3_70B", "GEMMA3_27B",
               "DEEPSEEK_V2"],
    "flash": ["tiled_attention"],
    "device": ["default_device"],
}
PUBLIC = [name for names in CONTRACT.values() for name in names]
CALLABLES = [n for n in PUBLIC if callable(getattr(attnlib, n))]


def test_all_is_exactly_the_contract():
    assert sorted(attnlib.__all__) == sorted(["__version__", *PUBLIC])
    assert len(attnlib.__all__) == 41  # 40 names and __version__
    assert attnlib.__version__ == "0.4.0"


@pytest.mark.parametrize("module,name", [(m, n) for m, names in CONTRACT.items() for n in names])
def test_every_name_is_its_submodule_object(module, name):
    submodule = __import__(f"attnlib.{module}", fromlist=["_"])
    assert getattr(attnlib, name) is getattr(submodule, name)


@pytest.mark.parametrize("path", [
    "tokens.BPETokenizer", "tokens.CharTokenizer", "tokens.WordTokenizer", "tokens.CORPUS",
    "tokens.embed", "tokens.row_cosines", "memory.LLAMA3_8B", "memory.PRESETS",
    "memory.CACHE_KINDS", "rope.rope_matrix", "rope.rope_permutation", "rope.rope_frequencies",
    "rope.rope_tables", "rope.rope_rotate", "rope.RopeTables",
    "heads.kv_head_index", "sliding.SlidingWindowAttention", "sliding.WindowCache",
    "heads.head_mask", "layers.FFN_KINDS", "layers.NORM_PLACEMENTS", "layers.swiglu",
    "mla.mla_merged_weights",
])
def test_names_outside_all_stay_in_their_submodule(path):
    module, name = path.split(".")
    assert getattr(getattr(attnlib, module), name) is not None
    assert name not in attnlib.__all__


def test_viz_and_exercises_load_on_first_use():
    code = (
        "import sys, attnlib\n"
        "assert 'attnlib.viz' not in sys.modules and 'attnlib.exercises' not in sys.modules\n"
        "assert attnlib.viz.__name__ == 'attnlib.viz'\n"
        "assert attnlib.exercises.__name__ == 'attnlib.exercises'\n"
        "assert 'attnlib.viz' in sys.modules and 'attnlib.exercises' in sys.modules\n"
        "assert not hasattr(attnlib, 'widgets')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        attnlib.nope  # noqa: B018


# --- the contract of DESIGN.md, name by name, with its parameter names ---------------------

SIGNATURES = {
    "attention": ["Q", "K", "V", "kernel", "mask", "causal", "scale", "impl"],
    "attention_weights": ["Q", "K", "kernel", "mask", "causal", "scale"],
    "tiled_attention": ["Q", "K", "V", "block_size", "causal", "scale"],
    "causal_mask": ["n_q", "n_kv", "device"],
    "apply_rope": ["X", "positions", "base", "interleaved"],
    "GroupedQueryAttention": ["d_in", "n_heads", "n_kv_heads", "d_head", "d_out", "rope_base",
                              "rope_interleaved", "device", "dtype"],
    "MultiHeadAttention": ["d_in", "n_heads", "d_head", "d_out"],
    "MultiQueryAttention": ["d_in", "n_heads", "d_head", "d_out"],
    "MultiHeadLatentAttention": ["d_in", "n_heads", "d_head", "d_latent", "d_latent_q",
                                 "d_rope", "d_v", "d_out", "latent_norm", "rope_base",
                                 "rope_interleaved", "device", "dtype"],
    "mla_from_mha": ["attn", "d_latent"],
    "RMSNorm": ["d", "eps"],
    "LayerNorm": ["d", "eps"],
    "FeedForward": ["d", "d_ff", "kind"],
    "TransformerBlock": ["norm"],
    # a variant's own options (n_kv_heads, d_latent, window, ...) go to its builder as they are
    "TinyDecoder": ["vocab_size", "d_model", "n_layers", "n_heads", "attention",
                    "attention_options"],
    "kv_cache_bytes": ["n_layers", "n_kv_heads", "d_head", "n_tokens", "batch",
                       "bytes_per_elem"],
    "mla_cache_bytes": ["n_layers", "d_latent", "d_rope", "n_tokens", "batch", "bytes_per_elem"],
    "ModelSpec": ["name", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_head",
                  "vocab_size", "d_latent", "d_rope"],
}
DEFAULTS = {
    ("attention", "kernel"): "softmax", ("attention", "impl"): "auto",
    ("attention", "causal"): False, ("tiled_attention", "block_size"): 128,
    ("apply_rope", "base"): 10000.0, ("apply_rope", "interleaved"): False,
    ("RMSNorm", "eps"): 1e-6, ("LayerNorm", "eps"): 1e-5, ("FeedForward", "kind"): "swiglu",
    ("kv_cache_bytes", "bytes_per_elem"): 2, ("mla_cache_bytes", "d_rope"): 0,
    ("GroupedQueryAttention", "rope_base"): None, ("MultiHeadLatentAttention", "d_rope"): 0,
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_contract_parameter_names(name):
    params = inspect.signature(getattr(attnlib, name)).parameters
    missing = [p for p in SIGNATURES[name] if p not in params]
    assert not missing, f"{name} lacks {missing}"
    for (fn, p), value in DEFAULTS.items():
        if fn == name:
            assert params[p].default == value, (name, p)


def test_contract_functions_work():
    Q = torch.tensor([[1.0, 0.0]])
    K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    V = torch.tensor([[10.0], [20.0], [30.0]])
    e = [math.exp(x / math.sqrt(2)) for x in (1, 0, -1)]
    expected = sum(w * v for w, v in zip(e, (10, 20, 30), strict=True)) / sum(e)
    for impl in ("auto", "explicit"):
        assert attnlib.attention(Q, K, V, impl=impl).item() == pytest.approx(expected, rel=1e-6)
    P = attnlib.attention_weights(Q, K, causal=True, scale=1.0)
    assert P.sum().item() == pytest.approx(1.0)
    Y = attnlib.tiled_attention(Q, K, V, block_size=2)
    assert Y.item() == pytest.approx(expected, rel=1e-6)
    assert attnlib.causal_mask(2, 3).tolist() == [[True, True, False], [True, True, True]]
    x = torch.tensor([[1.0, 0.0]])
    rotated = attnlib.apply_rope(x, torch.tensor([2]), base=10000.0, interleaved=False)
    assert rotated.tolist()[0] == pytest.approx([math.cos(2), math.sin(2)], rel=1e-6)
    assert attnlib.kv_cache_bytes(80, 8, 128, n_tokens=1, batch=1, bytes_per_elem=2) == 327_680
    assert attnlib.mla_cache_bytes(60, 512, d_rope=64) == 60 * 576 * 2
    assert attnlib.default_device().type in ("cpu", "cuda", "mps")


def test_contract_modules_work():
    X = torch.randn(2, 5, 16, dtype=torch.float64)
    gqa = attnlib.GroupedQueryAttention(16, 4, 2, 4, rope_base=10000.0, dtype=torch.float64)
    assert (gqa.W_Q.shape, gqa.W_K.shape, gqa.W_V.shape, gqa.W_O.shape) == (
        (16, 16), (16, 8), (16, 8), (16, 16))
    cache = attnlib.KVCache()
    pieces = [gqa(X[:, :3], causal=True, cache=cache), gqa(X[:, 3:], causal=True, cache=cache)]
    torch.testing.assert_close(torch.cat(pieces, 1), gqa(X, causal=True))
    assert cache.n_tokens == 5 and cache.nbytes == 2 * 2 * 2 * 5 * 4 * 8
    assert attnlib.MultiHeadAttention(16, 4, 4).n_kv_heads == 4
    assert attnlib.MultiQueryAttention(16, 4, 4).n_kv_heads == 1
    mla = attnlib.MultiHeadLatentAttention(16, 4, 3, 6, d_latent_q=5, d_rope=2,
                                           dtype=torch.float64)
    W = mla.merged_weights()
    assert W["W_LQK"].shape == (4, 5, 6) and W["W_LO"].shape == (4 * 6, 16)
    latent = attnlib.LatentCache()
    steps = [mla(X[:, :2], causal=True, cache=latent, absorbed=True),
             mla(X[:, 2:], causal=True, cache=latent, absorbed=True)]
    torch.testing.assert_close(torch.cat(steps, 1), mla(X, causal=True))
    assert latent.nbytes == 2 * 5 * (6 + 2) * 8
    src = attnlib.MultiHeadAttention(16, 4, 2, dtype=torch.float64)
    converted = attnlib.mla_from_mha(src, d_latent=16)
    torch.testing.assert_close(converted(X, causal=True), src(X, causal=True))
    for norm in ("pre", "post", "peri"):
        block = attnlib.TransformerBlock(16, 4, norm=norm)
        assert block(X.float(), causal=True).shape == (2, 5, 16)
    assert attnlib.FeedForward(16, 32, kind="gelu")(X.float()).shape == (2, 5, 16)
    assert attnlib.RMSNorm(16, eps=1e-6)(X).shape == attnlib.LayerNorm(16, eps=1e-5)(X).shape
    model = attnlib.TinyDecoder(40, 16, 2, 4, n_kv_heads=2, attention="gqa", seed=0)
    ids = torch.tensor([[1, 2, 3]])
    out = model.generate(ids, 4, use_cache=True)
    assert torch.equal(out, model.generate(ids, 4, use_cache=False)) and out.shape == (1, 7)


def test_contract_presets():
    spec = attnlib.ModelSpec("toy", 2, 64, 8, 2, 8, 100, d_latent=None, d_rope=0)
    assert spec.kv_bytes_per_token(bytes_per_elem=2) == 2 * 2 * 2 * 8 * 2
    assert attnlib.LLAMA3_70B.kv_bytes_per_token() == 2 * 80 * 8 * 128 * 2
    assert attnlib.GEMMA3_27B.kv_bytes_per_token() == 2 * 62 * 16 * 128 * 2
    assert attnlib.DEEPSEEK_V2.kv_bytes_per_token() == 60 * (512 + 64) * 2
    for spec in (attnlib.LLAMA3_70B, attnlib.GEMMA3_27B, attnlib.DEEPSEEK_V2):
        assert "arXiv:" in spec.source


# --- documentation ---------------------------------------------------------------------


@pytest.mark.parametrize("name", CALLABLES)
def test_every_public_callable_has_a_docstring_with_a_lesson(name):
    obj = getattr(attnlib, name)
    doc = inspect.getdoc(obj) or ""
    assert len(doc.splitlines()) >= 2, f"{name} needs a summary line and a body"
    module_doc = inspect.getdoc(inspect.getmodule(obj)) or ""
    assert "Lesson" in doc or "Lesson" in module_doc, name


@pytest.mark.parametrize("name", [n for n in CALLABLES if inspect.isfunction(getattr(attnlib, n))])
def test_public_functions_are_type_hinted(name):
    fn = getattr(attnlib, name)
    hints = typing.get_type_hints(fn)
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    missing = [p.name for p in params if p.name not in hints]
    assert not missing, f"{name}: parameters without type hints: {missing}"
    assert "return" in hints, f"{name}: no return annotation"


@pytest.mark.parametrize("module", [*CONTRACT, "tokens"])
def test_every_module_states_its_concept(module):
    mod = __import__(f"attnlib.{module}", fromlist=["_"])
    assert (mod.__doc__ or "").strip(), module


# --- layering: no module imports another module's private names ------------------------

# Private MODULES with public names (shared infrastructure) may be imported from.
SHARED = {"attnlib._checks", "attnlib._params"}


def _private_imports(source: str, here: str) -> list[str]:
    """``from attnlib.x import _name`` (or a private module ``attnlib._x``) in module ``here``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("attnlib") and node.module != here:
                found += [f"{node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and a.name != "__version__"]
                if any(part.startswith("_") for part in node.module.split(".")[1:]) and (
                        node.module not in SHARED):
                    found.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found += [f"(relative).{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("attnlib.")
                      and any(p.startswith("_") for p in a.name.split(".")[1:])
                      and a.name not in SHARED]
    return found


def test_no_module_imports_another_modules_private_names():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        here = "attnlib." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        offenders[here] = _private_imports(path.read_text(), here)
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_layering_check_can_fail():
    source = (
        "from attnlib.gqa import _check_config\n"
        "from attnlib.heads import split_heads\n"
        "from attnlib._checks import check_tensor\n"
        "from attnlib._secret import helper\n"
        "import attnlib._secret\n"
    )
    assert _private_imports(source, "attnlib.mla") == [
        "attnlib.gqa._check_config", "attnlib._secret", "attnlib._secret"]
