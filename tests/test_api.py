"""The public face of attnlib: the contract of DESIGN.md, the submodules, the layering rule."""

from __future__ import annotations

import ast
import importlib
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
    "core.functional": ["KERNELS", "attention", "attention_weights", "similarity",
                        "row_normalise"],
    "core.masks": ["causal_mask", "key_padding_mask", "sliding_window_mask"],
    "core.heads": ["split_heads", "merge_heads", "repeat_kv"],
    "core.rope": ["apply_rope"],
    "layers.gqa": ["GroupedQueryAttention", "MultiHeadAttention", "MultiQueryAttention",
                   "grouped_query_attention"],
    "layers.mla": ["MultiHeadLatentAttention", "mla_from_mha", "mla_naive", "mla_absorbed"],
    "layers.base": ["AttentionLayer"],
    "serving.cache": ["Cache", "KVCache", "LatentCache"],
    "layers.norms": ["LayerNorm", "RMSNorm", "layer_norm", "rms_norm"],
    "layers.blocks": ["FeedForward", "TransformerBlock", "TinyDecoder", "feed_forward"],
    "analysis.memory": ["ModelSpec", "kv_cache_bytes", "mla_cache_bytes", "LLAMA3_70B",
                        "GEMMA3_27B", "DEEPSEEK_V2"],
    "analysis.flash": ["tiled_attention"],
    "device": ["default_device"],
}
PUBLIC = [name for names in CONTRACT.values() for name in names]
CALLABLES = [n for n in PUBLIC if callable(getattr(attnlib, n))]


def test_all_is_exactly_the_contract():
    assert sorted(attnlib.__all__) == sorted(PUBLIC)
    assert len(attnlib.__all__) == 40
    assert attnlib.__version__ == "0.5.0"


@pytest.mark.parametrize("module,name", [(m, n) for m, names in CONTRACT.items() for n in names])
def test_every_name_is_its_submodule_object(module, name):
    submodule = __import__(f"attnlib.{module}", fromlist=["_"])
    assert getattr(attnlib, name) is getattr(submodule, name)


@pytest.mark.parametrize("path", [
    "tokens.BPETokenizer", "tokens.CharTokenizer", "tokens.WordTokenizer", "tokens.CORPUS",
    "tokens.embed", "tokens.row_cosines", "analysis.memory.LLAMA3_8B", "analysis.memory.PRESETS",
    "analysis.memory.CACHE_KINDS", "core.rope.rope_matrix", "core.rope.rope_permutation",
    "core.rope.rope_frequencies", "core.rope.rope_tables", "core.rope.rope_rotate",
    "core.rope.RopeTables", "core.heads.kv_head_index", "layers.sliding.SlidingWindowAttention",
    "serving.cache.WindowCache", "core.heads.head_mask", "layers.blocks.FFN_KINDS",
    "layers.blocks.NORM_PLACEMENTS", "layers.blocks.swiglu", "layers.mla.mla_merged_weights",
])
def test_names_outside_all_stay_in_their_submodule(path):
    module, name = path.rsplit(".", 1)
    assert getattr(importlib.import_module(f"attnlib.{module}"), name) is not None
    assert name not in attnlib.__all__


@pytest.mark.slow
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
        "from attnlib.layers.gqa import _check_config\n"
        "from attnlib.core.heads import split_heads\n"
        "from attnlib._checks import check_tensor\n"
        "from attnlib._secret import helper\n"
        "import attnlib._secret\n"
    )
    assert _private_imports(source, "attnlib.layers.mla") == [
        "attnlib.layers.gqa._check_config", "attnlib._secret", "attnlib._secret"]


# --- the floor plan: folders by layer of the design, each importing only from those below ---

# A folder's rank: it may import from the root's helpers and from folders of a lower rank.
# The kernels live on the functional core's floor (DESIGN.md): serving's paged cache calls one.
RANKS = {"root": 0, "core": 1, "kernels": 2, "serving": 3, "layers": 4, "analysis": 5,
         "models": 6, "viz": 7, "exercises": 7}


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir() else "root"


def _attnlib_imports(source: str) -> list[str]:
    """Every ``attnlib.*`` module a source imports, at the top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "attnlib":
                found += [f"attnlib.{a.name}" for a in node.names]
            elif node.module.startswith("attnlib."):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("attnlib.")]
    return found


def test_root_holds_few_modules_and_the_folders_are_packages():
    root = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert root == ["__init__", "_checks", "_params", "device", "examples", "tokens"]
    assert len(root) <= 8
    folders = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert set(RANKS) - {"root"} >= set(folders) and len(folders) >= 5, folders
    for folder in set(folders) - {"viz", "exercises"}:   # those two list lessons, not modules
        doc = importlib.import_module(f"attnlib.{folder}").__doc__ or ""
        for module in sorted((PACKAGE / folder).glob("[!_]*.py")):
            assert f"``{module.stem}``" in doc, f"attnlib/{folder}/__init__ omits {module.stem}"


def test_each_folder_imports_only_from_the_folders_below_it():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":
            continue
        here = "attnlib." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for target in _attnlib_imports(path.read_text()):
            a, b = _folder(here), _folder(target)
            if a != b and RANKS[b] >= RANKS[a]:
                upward.append(f"{here} -> {target}")
    assert upward == []


def test_the_floor_plan_check_can_fail():
    source = "from attnlib.layers.gqa import grouped_query_attention\nimport attnlib.viz.core\n"
    assert _attnlib_imports(source) == ["attnlib.layers.gqa", "attnlib.viz.core"]
    assert _folder("attnlib.serving.quant") == "serving" and _folder("attnlib.tokens") == "root"
    assert RANKS[_folder("attnlib.layers.gqa")] > RANKS[_folder("attnlib.serving.quant")]


# The public names of each folder: a change here is a change to the library's surface.
SURFACE = {
    "core": ["KERNELS", "Llama3Scaling", "RopeTables", "YarnScaling", "apply_rope", "attention",
             "attention_weights", "causal_mask", "head_mask", "key_padding_mask",
             "kv_head_index", "merge_heads", "position_ids", "query_positions", "repeat_kv",
             "rope_frequencies", "rope_matrix", "rope_permutation", "rope_rotate",
             "rope_tables", "row_normalise", "similarity", "sliding_window_mask",
             "split_heads"],
    "serving": [
            "AXES", "BITS", "BatchCounts", "BatchResult", "BlockManager", "Cache", "Engine",
            "KVCache", "LatentCache", "PagedKVCache", "PagingMemory", "QuantKVCache",
            "Quantised", "Request", "RollbackKVCache", "Rows", "Scheduler", "Sequence",
            "SinkCache", "SpeculativeResult", "StaticKVCache", "StaticLatentCache",
            "WindowCache", "accept_reject", "attention_error", "check_options",
            "continuous_batching", "dequantise", "held_values", "kept_positions",
            "min_p_filter", "paged_attention", "paging_memory", "quantise", "quantised_loss",
            "quantised_window_losses",
            "recomputed_logits", "rolling_logits", "sample", "speculative_generate",
            "static_batching_counts", "temperature_scale", "top_k_filter",
            "top_p_filter", "warp"
    ],
    "layers": [
            "ATTENTION", "AttendFn", "AttentionLayer", "FFN_KINDS", "FeedForward",
            "GatedAttention", "GroupedQueryAttention", "LayerNorm",
            "MultiHeadAttention", "MultiHeadLatentAttention", "MultiQueryAttention",
            "NORM_KINDS", "NORM_PLACEMENTS", "RMSNorm", "RopeFn",
            "SlidingWindowAttention", "TinyDecoder", "TransformerBlock", "feed_forward",
            "gqa_from_mha", "grouped_query_attention", "layer_norm", "mla_absorbed",
            "mla_from_mha", "mla_merged_weights", "mla_naive", "output_gate",
            "register_attention", "rms_norm", "swiglu"
    ],
    "analysis": [
            "CACHE_KINDS", "DECODE_PATHS", "DEEPSEEK_V2", "DEEPSEEK_V3", "DEEPSEEK_V32",
            "DEEPSEEK_V4_FLASH", "DEEPSEEK_V4_PRO", "ESTIMATORS",
            "FFN_MATRICES", "FRONTIER", "GEMMA3_27B", "GPT_OSS_120B", "Interval",
            "KIMI_LINEAR_48B", "LAYER_KINDS", "LAYER_PARTS", "LLAMA2_7B", "LLAMA3_70B",
            "LLAMA3_8B", "LinearAttentionState", "MAC_PARTS", "MISTRAL_7B", "ModelSpec",
            "PRESETS", "QWEN3_NEXT_80B", "Ratio", "STATE_PARTS", "Timing",
            "decode_step_macs", "decode_token_macs", "delta_rule", "effective_sample_size",
            "elu_feature_map", "fit_exponent", "gap_interval", "gaussian_features",
            "gaussian_sketch",
            "generation_macs", "importance_attention", "kv_cache_bytes", "layer_decode_macs",
            "linear_attention", "linear_attention_recurrent", "linformer_attention",
            "machine", "mla_cache_bytes", "mla_decode_cost", "multiply_adds", "norm_proposal",
            "nystrom_attention", "online_softmax", "paired_bootstrap", "performer_attention",
            "positive_random_features",
            "product_probabilities", "random_feature_kernel", "randomised_mla_from_mha",
            "randomised_svd", "randomised_svd_multiply_adds", "ratio", "sample_keys",
            "sampled_product", "sampled_product_mse", "sampling_variance", "seed_interval",
            "sketch_attention", "sketch_proposal", "sketched_logits", "t_quantile",
            "tiled_attention",
            "time_side_by_side", "topk_attention", "topk_mask"
    ],
    "kernels": ["FlashAttentionTorch", "attention_backward", "attention_forward",
                "tiled_backward", "tiled_forward"],
}


@pytest.mark.parametrize("folder", sorted(SURFACE))
def test_each_folders_public_names_are_listed(folder):
    module = importlib.import_module(f"attnlib.{folder}")
    assert sorted(module.__all__) == SURFACE[folder]
    for name in module.__all__:
        assert getattr(module, name) is not None, f"attnlib.{folder}.{name}"


@pytest.mark.parametrize("old,new", sorted(attnlib.MODULES_04.items()))
def test_the_module_names_of_0_4_reach_the_same_modules(old, new):
    assert getattr(attnlib, old) is importlib.import_module(new)
    assert old in dir(attnlib)


def test_the_trained_models_load_on_first_use():
    code = (
        "import sys, attnlib\n"
        "assert not any(m.startswith('attnlib.models.') for m in sys.modules)\n"
        "assert 'torch.nn' in sys.modules and 'attnlib.layers.gqa' in sys.modules\n"
        "assert attnlib.models.pretrained.WEIGHTS.is_dir()\n"
        "assert attnlib.pretrained is attnlib.models.pretrained\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
