#!/usr/bin/env python3
"""Builds the deepseek_v32 transformers-parity fixtures under tests/data/dsv32_<name>/.

Runs where torch + transformers 5.17 are installed (the GPU machine; CPU fp32
eager is all it uses). For each fixture it:
  1. builds a small random DeepseekV32ForCausalLM from a config in the spelling
     the fixture tests (the published checkpoint's rope_theta + rope_scaling,
     or what save_pretrained writes: rope_parameters, layer_types), and asserts
     the instantiated structure: head counts and widths, indexer heads / width /
     top-k, expert counts, groups, dense/MoE placement, rope type, and the
     softmax scale and rotary tables against the formulas of model-spec §3.3.1;
  2. re-initialises every weight with fan-in scaled normals so every layer and
     every indexer matters, saves it with save_pretrained (checkpoint names,
     per-expert mlp.experts.{e}.{gate,up,down}_proj) and rewrites the
     safetensors in the fixture's storage: bf16 (fp32 correction bias and
     indexer k_norm, as published), fp32, or FP8 e4m3 block-scaled: every matrix
     the published checkpoint stores in FP8 is quantised per 128x128 block
     (partial blocks at the edges get their own scale; scale = amax/448 in fp32,
     stored as <name>_scale_inv) and the config gets a quantization_config;
  3. reloads the reference with from_pretrained(dtype=float32,
     attn_implementation="eager"): the fixture directory itself, or for FP8 a
     copy holding the dequantised fp32 weights (fp8 · scale_inv per block,
     computed here; transformers' own Fp8Dequantize derives the block from
     rows // grid_rows and cannot dequantise partial blocks), asserts clean
     loading and bit-equal weights, and computes: logits of every prompt
     position, a greedy continuation, per-layer outputs, the per-layer
     perturbation sensitivity, the change when the indexer selects everything
     (the sparse result must differ from dense attention), and the margins a
     different fp32 implementation needs to make the same discrete choices:
     indexer top-k boundary, expert-group selection, expert top-k, greedy argmax.

Outputs per fixture: config.json, model.safetensors, prompt.npy (int32 [T]),
logits.npy (float32 [T, vocab]), generate.npy (int32 prompt+continuation),
layer_out.npy (float32 [L, T, D]: hidden state after each decoder layer) and
meta.json (versions, structure, rotary tables, margins, sensitivities, sha256).

GPU-parity fixtures g1, g2 ("gpu": True in the spec; README "GPU-parity fixtures
(dsv32_g1, dsv32_g2)"): bf16-exact weights, every indexer and router fitted to the
fixture's own prompt and greedy continuation so that the indexer's k-th vs (k+1)-th
gap is >= 2e-2 of the row's largest score and group / expert choices have gaps
>= 5e-2, gentle scales, a 5x lm_head (greedy gaps >= 0.1), and transformers' own bf16
error (bf16_floor_l2_rel, measured on --floor-device) <= 5e-3.

Usage: python3 make_dsv32_fixtures.py --out DIR [--only a,b,c]
       python3 make_dsv32_fixtures.py --out DIR --only g1,g2 [--floor-device cuda|cpu]
"""
import argparse
import copy
import hashlib
import inspect
import json
import math
import os
import platform
import shutil
import sys
import time
import traceback

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import transformers
from transformers import DeepseekV32Config, DeepseekV32ForCausalLM

PERTURB = 1.1
SENSITIVITY_MIN = 1e-2     # o_proj x1.1 must move the logits by 100x the 1e-4 tolerance
DENSE_DIFF_MIN = 1e-2      # all-selecting indexer vs the real one, whole model
LAYER_DENSE_DIFF_MIN = 1e-3  # the same, one layer at a time
# Margins (relative to the largest |value| of the row) below which a correct
# fp32 implementation could legitimately choose differently.
INDEX_MARGIN_MIN = 1e-5
ROUTING_MARGIN_MIN = 1e-5
GROUP_MARGIN_MIN = 1e-5
GREEDY_GAP_MIN = 1e-3
PROMPT_TRIES = 40
# Prompts are searched until one has an indexer margin of INDEX_MARGIN_GOOD, or
# SEARCH_TRIES have been tried and one passes; the best of those is taken.
INDEX_MARGIN_GOOD = 3e-5
SEARCH_TRIES = 12

# GPU-parity fixtures ("gpu": True): margins wide enough that bf16 execution (~4e-3
# relative per rounding) makes every discrete choice the fp32 reference makes, and a
# measured bf16 noise floor of transformers itself.
GPU_INDEX_MARGIN_MIN = 2e-2
GPU_INDEX_FIT_TARGET = 6e-2   # the fit aims past the minimum: rounding and later layers' refits move it
GPU_ROUTING_MARGIN_MIN = 5e-2  # group and expert choices alike, relative as above
GPU_GREEDY_GAP_MIN = 0.1
GPU_FLOOR_MAX = 5e-3
WIDE_ROUTER_ZMIN = 5.0  # |router logit| >= this: sigmoid within 0.007 of 0 or 1
GPU_FIT_ROUNDS = 8
GPU_PROMPT_TRIES = 6

BOS, EOS, PAD = 0, 1, 2  # in-vocabulary special ids; prompts use ids >= 3
FP8_MAX = 448.0
FP8_BLOCK = 128

YARN_PUBLISHED = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                  "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}

# Indexer head counts are odd and fairly large: a key whose every head has a
# negative q.k scores exactly 0 (ReLU), and exact ties at the top-k boundary
# would make the reference's selection depend on torch.topk's tie order.
FIXTURES = [
    # Published spelling (rope_theta + rope_scaling as in DeepSeek-V3.2-Exp's
    # config.json), bf16 storage.
    dict(name="a", seed=1101, layers=3, first_dense=1, vocab=320, hidden=96,
         heads=3, q_lora=64, kv_lora=48, nope=32, rope=16, v_head=32,
         index_heads=15, index_dim=32, index_topk=32,
         intermediate=160, moe_intermediate=32, experts=12, n_group=4, topk_group=2, top_k=3,
         shared=1, prompt_len=170, gen_prompt_len=170, gen_new=8,
         rope_style="published", rope_scaling=YARN_PUBLISHED, storage="bf16"),
    # FP8 block-scaled (partial 128x128 blocks: hidden 160, q_lora 136, dense
    # intermediate 272), transformers' save_pretrained config spelling with a
    # YaRN whose cos/sin factor is not 1 (mscale != mscale_all_dim).
    dict(name="b", seed=2202, layers=4, first_dense=2, vocab=384, hidden=160,
         heads=5, q_lora=136, kv_lora=64, nope=32, rope=32, v_head=32,
         index_heads=13, index_dim=48, index_topk=48,
         intermediate=272, moe_intermediate=48, experts=8, n_group=4, topk_group=2, top_k=2,
         shared=2, prompt_len=201, gen_prompt_len=93, gen_new=8,
         rope_style="saved",
         rope_scaling={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096,
                       "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.8},
         storage="fp8"),
    # Plain rope (rope_scaling null), fp32 storage, every layer MoE.
    dict(name="c", seed=3303, layers=2, first_dense=0, vocab=256, hidden=64,
         heads=7, q_lora=40, kv_lora=32, nope=16, rope=8, v_head=16,
         index_heads=11, index_dim=24, index_topk=40,
         intermediate=96, moe_intermediate=24, experts=6, n_group=2, topk_group=1, top_k=2,
         shared=1, prompt_len=150, gen_prompt_len=150, gen_new=8,
         rope_style="published", rope_scaling=None, storage="f32"),
    # GPU-parity fixtures (see the module doc and tools/reference/README.md): bf16-exact
    # weights, indexers and routers fitted to the fixture's own tokens, gentle scales,
    # a 5x lm_head. Odd MLA head counts (the CPU parity test asks every fixture for
    # one). g1: published YaRN, bf16 storage, 4 groups of 2 experts, 2 kept; g2: plain
    # rope, fp32 storage holding bf16-exact values, top-3 of the 4 experts of 2 kept
    # groups, a generate prompt shorter than the prompt.
    dict(name="g1", seed=4404, layers=2, first_dense=1, vocab=320, hidden=96,
         heads=3, q_lora=64, kv_lora=48, nope=32, rope=16, v_head=32,
         index_heads=9, index_dim=32, index_topk=32,
         intermediate=160, moe_intermediate=32, experts=8, n_group=4, topk_group=2, top_k=2,
         shared=1, prompt_len=170, gen_prompt_len=170, gen_new=8,
         rope_style="published", rope_scaling=YARN_PUBLISHED, storage="bf16",
         gpu=True, o_gain=0.15, ffn_gain=0.08, lm_head_gain=5.0),
    dict(name="g2", seed=5505, layers=2, first_dense=1, vocab=256, hidden=64,
         heads=5, q_lora=48, kv_lora=32, nope=16, rope=16, v_head=16,
         index_heads=7, index_dim=32, index_topk=48,
         intermediate=96, moe_intermediate=24, experts=6, n_group=3, topk_group=2, top_k=3,
         shared=1, prompt_len=201, gen_prompt_len=97, gen_new=8,
         rope_style="published", rope_scaling=None, storage="f32",
         gpu=True, o_gain=0.15, ffn_gain=0.08, lm_head_gain=5.0),
]

FP8_SUFFIXES = ("self_attn.q_a_proj.weight", "self_attn.q_b_proj.weight",
                "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_b_proj.weight",
                "self_attn.o_proj.weight", "self_attn.indexer.wq_b.weight", "self_attn.indexer.wk.weight",
                "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")


def log(*args):
    print(*args, flush=True)


def rel(a, b):
    return float(torch.linalg.norm((a - b).reshape(-1).double()) / torch.linalg.norm(b.reshape(-1).double()))


# ----------------------------------------------------------------------------- config

def checkpoint_config(spec):
    """The config.json a DeepSeek-V3.2 checkpoint carries, scaled down."""
    cfg = {
        "architectures": ["DeepseekV32ForCausalLM"],
        "model_type": "deepseek_v32",
        "vocab_size": spec["vocab"],
        "hidden_size": spec["hidden"],
        "intermediate_size": spec["intermediate"],
        "moe_intermediate_size": spec["moe_intermediate"],
        "num_hidden_layers": spec["layers"],
        "num_attention_heads": spec["heads"],
        "num_key_value_heads": spec["heads"],
        "n_shared_experts": spec["shared"],
        "n_routed_experts": spec["experts"],
        "routed_scaling_factor": 2.5,
        "kv_lora_rank": spec["kv_lora"],
        "q_lora_rank": spec["q_lora"],
        "qk_rope_head_dim": spec["rope"],
        "v_head_dim": spec["v_head"],
        "qk_nope_head_dim": spec["nope"],
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "n_group": spec["n_group"],
        "topk_group": spec["topk_group"],
        "num_experts_per_tok": spec["top_k"],
        "first_k_dense_replace": spec["first_dense"],
        "moe_layer_freq": 1,
        "norm_topk_prob": True,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": copy.deepcopy(spec["rope_scaling"]),
        "index_n_heads": spec["index_heads"],
        "index_head_dim": spec["index_dim"],
        "index_topk": spec["index_topk"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "num_nextn_predict_layers": 0,
        "use_cache": True,
        "torch_dtype": "float32" if spec["storage"] == "f32" else "bfloat16",
    }
    return cfg


def make_config(d):
    d = copy.deepcopy(d)
    d.pop("architectures", None)
    d.pop("model_type", None)
    d.pop("quantization_config", None)
    return DeepseekV32Config(**d)


# ----------------------------------------------------------------------------- reference formulas

def yarn_mscale(scale, m):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def expected_scaling(spec):
    s = (spec["nope"] + spec["rope"]) ** -0.5
    r = spec["rope_scaling"]
    if r and r.get("mscale_all_dim"):
        s *= yarn_mscale(r["factor"], r["mscale_all_dim"]) ** 2
    return s


def expected_attention_factor(spec):
    r = spec["rope_scaling"]
    if not r:
        return 1.0
    if r.get("mscale") and r.get("mscale_all_dim"):
        return yarn_mscale(r["factor"], r["mscale"]) / yarn_mscale(r["factor"], r["mscale_all_dim"])
    return yarn_mscale(r["factor"], 1.0)


def expected_inv_freq(spec):
    """model-spec §3.3.1 in float64 (the fp32 tables must agree to ~1e-6)."""
    dim, base = spec["rope"], 10000.0
    inv = np.array([base ** (-2 * i / dim) for i in range(dim // 2)])
    r = spec["rope_scaling"]
    if not r:
        return inv
    f, L0 = r["factor"], r["original_max_position_embeddings"]
    def corr(n):
        return dim * math.log(L0 / (n * 2 * math.pi)) / (2 * math.log(base))
    low = max(math.floor(corr(r["beta_fast"])), 0)
    high = min(math.ceil(corr(r["beta_slow"])), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
    return inv * (1 - ramp) + (inv / f) * ramp


# ----------------------------------------------------------------------------- structure

def describe(model):
    out = []
    for i, layer in enumerate(model.model.layers):
        a, mlp = layer.self_attn, layer.mlp
        ix = a.indexer
        d = {"index": i,
             "heads": int(a.num_heads),
             "q_a_rows": int(a.q_a_proj.weight.shape[0]),
             "q_b_rows": int(a.q_b_proj.weight.shape[0]),
             "kv_a_rows": int(a.kv_a_proj_with_mqa.weight.shape[0]),
             "kv_b_rows": int(a.kv_b_proj.weight.shape[0]),
             "o_in": int(a.o_proj.weight.shape[1]),
             "scaling": float(a.scaling),
             "index_heads": int(ix.n_heads), "index_dim": int(ix.head_dim),
             "index_topk": int(ix.index_topk),
             "index_wq_b_rows": int(ix.wq_b.weight.shape[0])}
        if hasattr(mlp, "experts"):
            d["ffn"] = "moe"
            d["experts"] = int(mlp.experts.gate_up_proj.shape[0])
            d["expert_intermediate"] = int(mlp.experts.gate_up_proj.shape[1] // 2)
            d["top_k"] = int(mlp.gate.top_k)
            d["n_group"] = int(mlp.gate.num_group)
            d["topk_group"] = int(mlp.gate.topk_group)
            d["routed_scaling"] = float(mlp.gate.routed_scaling_factor)
            d["shared_intermediate"] = int(mlp.shared_experts.gate_proj.weight.shape[0])
        else:
            d["ffn"] = "dense"
            d["dense_intermediate"] = int(mlp.gate_proj.weight.shape[0])
        out.append(d)
    return out


def check_structure(model, spec):
    errs = []
    desc = describe(model)
    if len(desc) != spec["layers"]:
        errs.append(f"{len(desc)} layers")
    qd = spec["nope"] + spec["rope"]
    for d in desc:
        i = d["index"]
        want = {"heads": spec["heads"], "q_a_rows": spec["q_lora"], "q_b_rows": spec["heads"] * qd,
                "kv_a_rows": spec["kv_lora"] + spec["rope"],
                "kv_b_rows": spec["heads"] * (spec["nope"] + spec["v_head"]),
                "o_in": spec["heads"] * spec["v_head"], "index_heads": spec["index_heads"],
                "index_dim": spec["index_dim"], "index_topk": spec["index_topk"],
                "index_wq_b_rows": spec["index_heads"] * spec["index_dim"]}
        for k, v in want.items():
            if d[k] != v:
                errs.append(f"layer {i}: {k}={d[k]}, want {v}")
        if abs(d["scaling"] - expected_scaling(spec)) > 1e-12:
            errs.append(f"layer {i}: scaling {d['scaling']} != {expected_scaling(spec)}")
        want_ffn = "dense" if i < spec["first_dense"] else "moe"
        if d["ffn"] != want_ffn:
            errs.append(f"layer {i}: ffn {d['ffn']}, want {want_ffn}")
        elif want_ffn == "dense":
            if d["dense_intermediate"] != spec["intermediate"]:
                errs.append(f"layer {i}: dense intermediate {d['dense_intermediate']}")
        else:
            for k, v in {"experts": spec["experts"], "expert_intermediate": spec["moe_intermediate"],
                         "top_k": spec["top_k"], "n_group": spec["n_group"],
                         "topk_group": spec["topk_group"],
                         "shared_intermediate": spec["shared"] * spec["moe_intermediate"]}.items():
                if d[k] != v:
                    errs.append(f"layer {i}: {k}={d[k]}, want {v}")
    rot = model.model.rotary_emb
    want_type = spec["rope_scaling"]["type" if "type" in (spec["rope_scaling"] or {}) else "rope_type"] \
        if spec["rope_scaling"] else "default"
    if rot.rope_type != want_type:
        errs.append(f"rope_type {rot.rope_type}, want {want_type}")
    if abs(float(rot.attention_scaling) - expected_attention_factor(spec)) > 1e-12:
        errs.append(f"attention_scaling {rot.attention_scaling} != {expected_attention_factor(spec)}")
    inv = rot.inv_freq.double().numpy()
    ref = expected_inv_freq(spec)
    if inv.shape != ref.shape or np.max(np.abs(inv - ref) / ref) > 1e-6:
        errs.append(f"inv_freq {inv} != {ref}")
    return errs


# ----------------------------------------------------------------------------- weights

def init_weights(model, gen, o_gain, spec=None):
    """Fan-in scaled normal weights; every parameter is assigned exactly once. GPU
    fixtures: norm weights 0.5 / 1 / 2 (bf16 x weight is exact), gentler FFN down
    projections and a wider lm_head (spec's ffn_gain / lm_head_gain)."""
    spec = spec or {}
    done = set()

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if "embed_tokens" in name:
                p.copy_(normal(shape, 1.0))
            elif name.endswith("k_norm.bias"):
                p.copy_(normal(shape, 0.1))
            elif len(shape) == 1 and spec.get("gpu"):
                p.copy_(2.0 ** torch.randint(-1, 2, shape, generator=gen).float())
            elif len(shape) == 1:
                # RMSNorm / LayerNorm weights near 1, not exactly 1, so a skipped
                # multiply shows.
                p.copy_(normal(shape, 0.1, 1.0))
            else:
                fan_in = shape[-1]
                gain = o_gain if name.endswith("o_proj.weight") else 1.0
                if name == "lm_head.weight":
                    gain = spec.get("lm_head_gain", 1.0)
                elif name.endswith("down_proj.weight") or name.endswith("down_proj"):
                    gain = spec.get("ffn_gain", 1.0)
                p.copy_(normal(shape, gain / math.sqrt(fan_in)))
            done.add(name)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                # Comparable to the gaps between sigmoid scores, so it changes choices.
                b.copy_(normal(tuple(b.shape), 0.1))
    missing = [n for n, _ in model.named_parameters() if n not in done]
    assert not missing, missing


def stored_dtype(spec, name):
    if spec["storage"] == "f32":
        return torch.float32
    if name.endswith("e_score_correction_bias") or ".indexer.k_norm." in name:
        return torch.float32  # fp32 in the published checkpoint
    return torch.bfloat16


def is_fp8_name(name):
    if ".mlp.experts." in name and name.endswith("_proj.weight"):
        return True
    if ".mlp.shared_experts." in name and name.endswith("_proj.weight"):
        return True
    return any(name.endswith(s) for s in FP8_SUFFIXES)


def quantize_fp8_blocks(w, block=FP8_BLOCK):
    """Per-block e4m3 quantisation. Returns (fp8 codes, fp32 scale_inv [ceil, ceil],
    dequantised fp32 = fp8.float() * scale_inv of the element's block)."""
    w = w.float()
    rows, cols = w.shape
    gr, gc = -(-rows // block), -(-cols // block)
    q = torch.empty((rows, cols), dtype=torch.float8_e4m3fn)
    scale = torch.empty((gr, gc), dtype=torch.float32)
    deq = torch.empty((rows, cols), dtype=torch.float32)
    for i in range(gr):
        for j in range(gc):
            blk = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            amax = blk.abs().max().clamp(min=1e-12)
            s = (amax / FP8_MAX).to(torch.float32)
            qb = (blk / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = qb
            scale[i, j] = s
            deq[i * block:(i + 1) * block, j * block:(j + 1) * block] = qb.float() * s
    return q, scale, deq


def dequantize_fp8_blocks(q, scale, block=FP8_BLOCK):
    """Independent check of the stored pair: numpy, element (i, j) uses block (i//B, j//B)."""
    qf = q.float().numpy()
    s = scale.numpy()
    rows, cols = qf.shape
    si = np.repeat(np.repeat(s, block, axis=0), block, axis=1)[:rows, :cols]
    return torch.from_numpy((qf * si).astype(np.float32))


# ----------------------------------------------------------------------------- probes

class Probe:
    """Records, for every indexer and router call, the margins of its discrete
    choices, recomputed from the module's inputs with the reference's own ops."""

    def __init__(self, model):
        self.index_margins, self.route_margins, self.group_margins = [], [], []
        self.handles = []
        for layer in model.model.layers:
            # Layers of other mixer kinds (strata_hybrid's KDA) have no indexer.
            ix = getattr(layer.self_attn, "indexer", None)
            if ix is not None:
                self.handles.append(ix.register_forward_hook(self._indexer_hook(ix), with_kwargs=True))
            if hasattr(layer.mlp, "experts"):
                self.handles.append(layer.mlp.gate.register_forward_pre_hook(self._router_hook(layer.mlp.gate)))

    def _indexer_hook(self, ix):
        def fn(mod, args, kwargs, out):
            names = ["hidden_states", "q_resid", "position_embeddings", "attention_mask", "position_ids"]
            vals = dict(zip(names, args))
            vals.update(kwargs)
            x, q_resid = vals["hidden_states"], vals["q_resid"]
            cos, sin = vals["position_embeddings"]
            mask = vals["attention_mask"]
            past = vals.get("past_key_values")
            B, S, _ = x.shape
            from transformers.models.deepseek_v32.modeling_deepseek_v32 import apply_rotary_pos_emb
            q = mod.wq_b(q_resid).view(B, S, mod.n_heads, mod.head_dim)
            q_rot, q_pass = torch.split(q, [mod.qk_rope_head_dim, mod.head_dim - mod.qk_rope_head_dim], -1)
            k = mod.k_norm(mod.wk(x)).unsqueeze(2)
            k_rot, k_pass = torch.split(k, [mod.qk_rope_head_dim, mod.head_dim - mod.qk_rope_head_dim], -1)
            q_rot, k_rot = apply_rotary_pos_emb(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
            q = torch.cat([q_rot, q_pass], -1)
            k = torch.cat([k_rot, k_pass], -1).squeeze(2)
            if past is not None:
                # The hook runs after the module appended k: the cache holds all keys.
                k = past.layers[mod.layer_idx].indexer_keys
            scores = torch.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * mod.softmax_scale)
            w = mod.weights_proj(x.to(mod.weights_proj.weight.dtype)).float() * (mod.n_heads ** -0.5)
            idx = torch.matmul(w.unsqueeze(-2), scores).squeeze(-2)[0]  # [S, T]
            allowed = (mask[0] == 0) if mask.dtype != torch.bool else mask[0]
            for s in range(S):
                row = idx[s][allowed[s]]
                n = row.numel()
                if n <= mod.index_topk:
                    continue
                srt = torch.sort(row, descending=True).values
                gap = float(srt[mod.index_topk - 1] - srt[mod.index_topk])
                self.index_margins.append(gap / max(float(row.abs().max()), 1e-30))
        return fn

    def _router_hook(self, gate):
        def fn(mod, args):
            x = args[0].reshape(-1, mod.hidden_dim).float()
            s = torch.sigmoid(x @ mod.weight.float().t())
            b = s + mod.e_score_correction_bias.float()
            E, G, K, TG = mod.num_experts, mod.num_group, mod.top_k, mod.topk_group
            grp = b.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
            for t in range(b.shape[0]):
                scale = float(b[t].abs().max())
                if TG < G:
                    gs = torch.sort(grp[t], descending=True).values
                    self.group_margins.append(float(gs[TG - 1] - gs[TG]) / scale)
                keep = torch.zeros(G, dtype=torch.bool)
                keep[torch.topk(grp[t], TG).indices] = True
                elig = b[t].view(G, E // G)[keep].reshape(-1)
                es = torch.sort(elig, descending=True).values
                if es.numel() > K:
                    self.route_margins.append(float(es[K - 1] - es[K]) / scale)
        return fn

    def take(self):
        # None: no choice of that kind was made (e.g. no query had more than
        # index_topk keys); JSON has no infinity.
        out = {k: (min(v) if v else None) for k, v in
               (("index", self.index_margins), ("routing", self.route_margins), ("group", self.group_margins))}
        out["index_rows"] = len(self.index_margins)
        self.index_margins, self.route_margins, self.group_margins = [], [], []
        return out

    def close(self):
        for h in self.handles:
            h.remove()


def worst_margins(margins):
    return {k: min([m[k] for m in margins.values() if m[k] is not None], default=float("inf"))
            for k in ("index", "routing", "group")}


def margins_ok(margins):
    w = worst_margins(margins)
    return w["index"] >= INDEX_MARGIN_MIN and w["routing"] >= ROUTING_MARGIN_MIN and w["group"] >= GROUP_MARGIN_MIN


# ----------------------------------------------------------------------------- reference runs

def logits_full(model, ids, use_cache=False):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=use_cache).logits[0].float()


def logits_split(model, ids, n):
    """Prefill n tokens in one call, then the rest one token at a time (cached)."""
    with torch.no_grad():
        out = model(input_ids=ids[:, :n], use_cache=True)
        parts = [out.logits[0].float()]
        past = out.past_key_values
        for t in range(n, ids.shape[1]):
            out = model(input_ids=ids[:, t:t + 1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            parts.append(out.logits[0].float())
        return torch.cat(parts, 0)


def greedy_manual(model, ids, k):
    toks, gaps = [], []
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past = out.past_key_values
        for step in range(k):
            last = out.logits[0, -1].float()
            top2 = torch.topk(last, 2)
            gaps.append(float(top2.values[0] - top2.values[1]))
            tok = int(top2.indices[0])
            toks.append(tok)
            if step + 1 < k:
                out = model(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
    return toks, gaps


def greedy_generate(model, ids, k):
    gc = copy.deepcopy(model.generation_config)
    gc.do_sample = False
    gc.num_beams = 1
    gc.max_new_tokens = k
    gc.min_new_tokens = None
    gc.eos_token_id = None
    gc.pad_token_id = PAD
    for attr in ("temperature", "top_p", "top_k", "repetition_penalty"):
        if hasattr(gc, attr):
            setattr(gc, attr, None)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gc)
    return [int(t) for t in out[0, ids.shape[1]:]]


def with_dense_indexer(model, layers):
    """Context: the given layers' indexers select every causal key."""
    class Ctx:
        def __enter__(self):
            self.saved = [model.model.layers[i].self_attn.indexer.index_topk for i in layers]
            for i in layers:
                model.model.layers[i].self_attn.indexer.index_topk = 10 ** 9
        def __exit__(self, *exc):
            for i, v in zip(layers, self.saved):
                model.model.layers[i].self_attn.indexer.index_topk = v
    return Ctx()


def layer_outputs(model, ids):
    outs, handles = [], []
    for layer in model.model.layers:
        handles.append(layer.register_forward_hook(
            lambda m, i, o: outs.append((o[0] if isinstance(o, tuple) else o)[0].float().clone())))
    try:
        logits_full(model, ids)
    finally:
        for h in handles:
            h.remove()
    return torch.stack(outs, 0)


def sensitivities(model, ids, ref_logits):
    res = []
    for i in range(len(model.model.layers)):
        entry = {"layer": i}
        m2 = copy.deepcopy(model)
        with torch.no_grad():
            m2.model.layers[i].self_attn.o_proj.weight.mul_(PERTURB)
        entry["o_proj"] = rel(logits_full(m2, ids), ref_logits)
        del m2
        with with_dense_indexer(model, [i]):
            entry["dense_indexer"] = rel(logits_full(model, ids), ref_logits)
        res.append(entry)
    return res


# ----------------------------------------------------------------------------- GPU-parity helpers

def round_to_bf16_values(model):
    """Every parameter and buffer to a bf16-exact value (in place), whatever its storage
    dtype: the GPU uploads bf16, so the fp32 reference must hold exactly those values."""
    with torch.no_grad():
        # Parameters and the correction bias; not the rotary inv_freq buffer (not saved,
        # recomputed at load).
        tensors = [p for _, p in model.named_parameters()]
        tensors += [b for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")]
        for p in tensors:
            p.copy_(p.to(torch.bfloat16).float())


def indexer_inputs(model, seqs, run=None):
    """Per layer with an indexer, the indexer's inputs (hidden states, q_resid, cos,
    sin) for each sequence in `seqs` (one causal forward each, by `run`, default
    logits_full: a decode step's query sees exactly the keys the same position sees in
    a prefill of the whole sequence)."""
    run = run or logits_full
    caught = {i: [] for i, layer in enumerate(model.model.layers) if hasattr(layer.self_attn, "indexer")}
    handles = []
    for i in caught:
        ix = model.model.layers[i].self_attn.indexer
        def hook(mod, args, kwargs, i=i):
            names = ["hidden_states", "q_resid", "position_embeddings", "attention_mask", "position_ids"]
            vals = dict(zip(names, args))
            vals.update(kwargs)
            cos, sin = vals["position_embeddings"]
            caught[i].append((vals["hidden_states"][0].float().clone(), vals["q_resid"][0].float().clone(),
                              cos[0].float().clone(), sin[0].float().clone()))
        handles.append(ix.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        for ids in seqs:
            run(model, ids)
    finally:
        for h in handles:
            h.remove()
    return caught


def index_scores(ix, x, q_resid, cos, sin):
    """The indexer's score matrix [S, S] (before the causal mask) as transformers computes
    it, differentiable in wq_b / wk / weights_proj."""
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import apply_rotary_pos_emb
    S = x.shape[0]
    rd = ix.qk_rope_head_dim
    q = ix.wq_b(q_resid).view(S, ix.n_heads, ix.head_dim)
    k = ix.k_norm(ix.wk(x)).unsqueeze(1)
    q_rot, q_pass = torch.split(q, [rd, ix.head_dim - rd], -1)
    k_rot, k_pass = torch.split(k, [rd, ix.head_dim - rd], -1)
    q_rot, k_rot = apply_rotary_pos_emb(q_rot, k_rot, cos, sin, unsqueeze_dim=1)
    q = torch.cat([q_rot, q_pass], -1)          # [S, H, d]
    k = torch.cat([k_rot, k_pass], -1)[:, 0]     # [S, d]
    sc = torch.relu(torch.einsum("shd,td->sht", q, k) * ix.softmax_scale)
    w = ix.weights_proj(x) * (ix.n_heads ** -0.5)  # [S, H]
    return torch.einsum("sh,sht->st", w, sc)


def index_gaps(scores, topk):
    """Relative k-th vs (k+1)-th gap of every causal row with more than topk keys."""
    S = scores.shape[0]
    if S <= topk:
        return torch.zeros(0)
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    masked = scores.masked_fill(~causal, float("-inf"))[topk:]
    srt = torch.sort(masked, dim=-1, descending=True).values
    top = scores.abs().masked_fill(~causal, 0.0)[topk:].max(dim=-1).values.clamp(min=1e-30)
    return (srt[:, topk - 1] - srt[:, topk]) / top


def fit_indexer(ix, inputs, target, steps, name, layer):
    """Fits wq_b, wk and weights_proj so that every causal row of every captured
    sequence has a k-th vs (k+1)-th score gap of at least `target` of the row's largest
    score: a hinge on that gap only, so which keys a row selects stays the model's."""
    params = [ix.wq_b.weight, ix.wk.weight, ix.weights_proj.weight]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=3e-3)
    with torch.enable_grad():
        for step in range(steps):
            gaps = torch.cat([index_gaps(index_scores(ix, *inp), ix.index_topk) for inp in inputs])
            loss = torch.relu(target - gaps).pow(2).mean()
            if step % 50 == 0 or step == steps - 1:
                log(f"[{name}] indexer fit layer {layer} step {step}: min gap {float(gaps.min()):.4f}, "
                    f"{int((gaps < target).sum())} of {gaps.numel()} rows below {target}")
            if float(loss) == 0.0:
                break
            opt.zero_grad()
            loss.backward()
            opt.step()
    for p in params:
        p.requires_grad_(False)


def router_inputs(model, layer_idx, seqs, run=None):
    run = run or logits_full
    gate = model.model.layers[layer_idx].mlp.gate
    rows = []
    h = gate.register_forward_pre_hook(lambda mod, args: rows.append(args[0].reshape(-1, mod.hidden_dim).float().clone()))
    try:
        for ids in seqs:
            run(model, ids)
    finally:
        h.remove()
    return torch.cat(rows, 0)


def fit_router(x, n_experts, gen, init=None):
    """Router weights [E, D] with |logit| >= WIDE_ROUTER_ZMIN for every row of x (a weak
    penalty keeps them below 12): every sigmoid score is within 0.007 of 0 or 1. Which
    side a token lands on is the fit's (from a random start), so selections vary."""
    d = x.shape[1]
    if init is None:
        init = torch.randn((n_experts, d), generator=gen) * (6.0 / math.sqrt(d))
    w = init.clone().float().requires_grad_(True)
    opt = torch.optim.Adam([w], lr=0.05)
    target = WIDE_ROUTER_ZMIN + 1.0
    with torch.enable_grad():
        for _ in range(600):
            a = (x @ w.t()).abs()
            loss = torch.relu(target - a).pow(2).mean() + 0.01 * torch.relu(a - 12.0).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return w.detach()


def spaced_bias(spec, gen, tries=4000):
    """e_score_correction_bias = a permutation of k / E (k = 0..E-1; bf16-exact for E a
    power of two, rounded otherwise). With saturated sigmoids (0 or 1), two experts'
    biased scores differ by a nonzero multiple of 1/E plus an integer, so never by less
    than 1/E - 0.014; the permutation is chosen so that the groups' top-2 sums (any pair
    of a group) are likewise as far apart modulo 1 as it gets."""
    E, G = spec["experts"], spec["n_group"]
    m = E // G
    best, best_perm = -1.0, None
    for _ in range(tries):
        perm = torch.randperm(E, generator=gen)
        b = perm.double() / E
        sums = []
        for g in range(G):
            vals = b[g * m:(g + 1) * m].tolist()
            sums.append([vals[i] + vals[j] for i in range(m) for j in range(i + 1, m)])
        worst = 1.0
        for g in range(G):
            for h in range(g + 1, G):
                for u in sums[g]:
                    for v in sums[h]:
                        d = (u - v) % 1.0
                        worst = min(worst, d, 1.0 - d)
        if worst > best:
            best, best_perm = worst, perm
    return (best_perm.float() / E).to(torch.bfloat16).float(), best


def gpu_margins(model, spec, ids, gen_ids, run=None, greedy=None):
    run, greedy = run or logits_full, greedy or greedy_manual
    probe = Probe(model)
    try:
        run(model, ids)
        m_prompt = probe.take()
        new_tokens, gaps = greedy(model, gen_ids, spec["gen_new"])
        m_gen = probe.take()
    finally:
        probe.close()
    return {"prompt": m_prompt, "generate": m_gen}, new_tokens, gaps


def gpu_margins_ok(margins, gaps):
    w = worst_margins(margins)
    return (w["index"] >= GPU_INDEX_MARGIN_MIN and w["routing"] >= GPU_ROUTING_MARGIN_MIN
            and w["group"] >= GPU_ROUTING_MARGIN_MIN and min(gaps) >= GPU_GREEDY_GAP_MIN)


def fit_for_bf16(model, spec, ids, gen_ids, prompt_try, name, run=None, greedy=None):
    """Fits every indexer and router to this prompt and its greedy continuation, layer
    by layer (a layer's inputs depend on the layers before it only), over a few rounds
    (the continuation depends on all of them). `run` (full-sequence logits) and
    `greedy` (a greedy continuation and its top-2 gaps) default to transformers'
    DeepseekV32ForCausalLM calls; layers without an indexer or experts are skipped.
    Returns what meta.json records."""
    run, greedy = run or logits_full, greedy or greedy_manual
    gen = torch.Generator().manual_seed(spec["seed"] * 7 + prompt_try)
    layers = model.model.layers
    moe = [i for i in range(len(layers)) if hasattr(layers[i].mlp, "experts")]
    bias = {}
    for i in moe:
        bias[i], bias_sep = spaced_bias(spec, gen)
        log(f"[{name}] layer {i} bias {bias[i].tolist()} (group pair sums >= {bias_sep:.3f} apart mod 1)")
    router_bank = {i: [] for i in moe}
    history = []
    seqs = [ids]  # the prompt and every continuation seen so far
    for rnd in range(GPU_FIT_ROUNDS):
        new_tokens, _ = greedy(model, gen_ids, spec["gen_new"])
        seq = torch.cat([gen_ids, torch.tensor([new_tokens])], 1)
        if not any(torch.equal(seq, q) for q in seqs):
            seqs.append(seq)
        for i in range(len(layers)):
            ix = getattr(layers[i].self_attn, "indexer", None)
            if ix is not None:
                inputs = indexer_inputs(model, seqs, run)[i]
                fit_indexer(ix, inputs, GPU_INDEX_FIT_TARGET, 400, name, i)
                round_to_bf16_values(model)
            if i in moe:
                gate = model.model.layers[i].mlp.gate
                router_bank[i].append(router_inputs(model, i, seqs[:1] + seqs[-1:], run))
                x = torch.cat(router_bank[i], 0)
                w = fit_router(x, spec["experts"], gen, None if rnd == 0 else gate.weight.detach().float())
                with torch.no_grad():
                    gate.weight.copy_(w)
                    gate.e_score_correction_bias.copy_(bias[i])
                round_to_bf16_values(model)
                z = x @ gate.weight.float().t()
                log(f"[{name}] round {rnd} layer {i} router: {x.shape[0]} inputs, min |z| "
                    f"{float(z.abs().min()):.3f}, max |z| {float(z.abs().max()):.2f}")
        margins, _, gaps = gpu_margins(model, spec, ids, gen_ids, run, greedy)
        w = worst_margins(margins)
        history.append({"round": rnd, **w, "greedy_gap": min(gaps)})
        log(f"[{name}] fit round {rnd}: margins {json.dumps(w)}; greedy gap min {min(gaps):.3f}")
        if gpu_margins_ok(margins, gaps):
            break
    return {"construction": "every indexer's wq_b / wk / weights_proj fitted (Adam, hinge on the "
                            f"k-th vs (k+1)-th gap, target {GPU_INDEX_FIT_TARGET}) to the causal rows of the "
                            "prompt and of the generate prompt + greedy continuation; every router's "
                            f"weight fitted so |logit| >= {WIDE_ROUTER_ZMIN}; e_score_correction_bias a "
                            "permutation of k / n_experts chosen so groups' top-2 sums are far apart; "
                            "every weight rounded to a bf16-exact value",
            "rounds": history, "bias": {str(i): bias[i].tolist() for i in moe},
            "lm_head_gain": spec.get("lm_head_gain", 1.0), "o_gain": spec.get("o_gain"),
            "ffn_gain": spec.get("ffn_gain")}


def selections(model, ids):
    out, handles = [], []
    for layer in model.model.layers:
        if hasattr(layer.mlp, "experts"):
            handles.append(layer.mlp.gate.register_forward_hook(
                lambda m, i, o: out.append(torch.sort(o[2], dim=-1).values.cpu())))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    return out


def bf16_floor(fdir, prompt, ref_logits, device):
    """transformers itself, in bf16 and in fp32 on `device`, against the fp32 logits
    (the meta.json fields bf16_floor_l2_rel and bf16_floor)."""
    ids = torch.tensor(np.asarray(prompt)[None].astype(np.int64)).to(device)
    ref = torch.as_tensor(np.asarray(ref_logits, dtype=np.float32))
    res, sel = {}, {}
    for label, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        m = DeepseekV32ForCausalLM.from_pretrained(fdir, dtype=dt, attn_implementation="eager").to(device).eval()
        with torch.no_grad():
            out = m(input_ids=ids).logits[0].float().cpu()
        rows = torch.linalg.norm(out - ref, dim=1) / torch.linalg.norm(ref, dim=1)
        res[label] = {"l2_rel": rel(out, ref), "worst_row": int(rows.argmax()),
                      "worst_row_rel": float(rows.max()),
                      "argmax_agree": float((out.argmax(1) == ref.argmax(1)).float().mean())}
        sel[label] = selections(m, ids)
        del m
    flips = sum(int((a != b).any(dim=-1).sum()) for a, b in zip(sel["bf16"], sel["fp32"]))
    dev = torch.cuda.get_device_name(0) if str(device).startswith("cuda") else "cpu"
    return {
        "bf16_floor_l2_rel": res["bf16"]["l2_rel"],
        "bf16_floor": {
            "what": "transformers DeepseekV32ForCausalLM.from_pretrained(fixture dir, dtype=torch.bfloat16, "
                    "attn_implementation='eager'), full-prompt logits vs logits.npy (fp32)",
            "device": f"{device} ({dev})",
            "note": "measured on the CPU (no GPU where the fixtures were built)" if dev == "cpu" else "",
            "bf16": res["bf16"], "fp32_same_device": res["fp32"],
            "routing_selection_flips_bf16_vs_fp32": flips,
            "routing_selections_compared": int(sum(a.shape[0] for a in sel["fp32"])),
            "required_max": GPU_FLOOR_MAX,
            "transformers": transformers.__version__, "torch": torch.__version__,
        },
    }


# ----------------------------------------------------------------------------- one fixture

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def build_fixture(spec, out_root, env_info, floor_device=None):
    t0 = time.time()
    try:
        return build_fixture_timed(spec, out_root, env_info, floor_device)
    finally:
        log(f"[dsv32_{spec['name']}] took {time.time() - t0:.1f} s")


def build_fixture_timed(spec, out_root, env_info, floor_device):
    name = f"dsv32_{spec['name']}"
    fdir = os.path.join(out_root, name)
    tmp = os.path.join(out_root, f"_tmp_{name}")
    log(f"\n===== {name}: {json.dumps(spec)}")
    cfg_dict = checkpoint_config(spec)
    config = make_config(cfg_dict)
    torch.manual_seed(spec["seed"])
    model = DeepseekV32ForCausalLM(config)
    errs = check_structure(model, spec)
    if errs:
        raise RuntimeError(f"{name}: wrong structure: {errs}")
    log(f"[{name}] structure: {json.dumps(describe(model))}")
    log(f"[{name}] layer 0 / last parameter names: {[n for n, _ in model.model.layers[0].named_parameters()]} "
        f"{[n for n, _ in model.model.layers[-1].named_parameters()]}")
    log(f"[{name}] rope: type={model.model.rotary_emb.rope_type} inv_freq={model.model.rotary_emb.inv_freq.tolist()} "
        f"attention_scaling={model.model.rotary_emb.attention_scaling} scaling={model.model.layers[0].self_attn.scaling}")

    o_gain = spec.get("o_gain", 2.0)
    result = None
    for attempt in range(3):
        if spec.get("gpu"):
            # GPU fixtures fit the model to one prompt: a new prompt is a new fit.
            for prompt_try in range(GPU_PROMPT_TRIES):
                result = try_fixture(spec, cfg_dict, model, fdir, tmp, o_gain, env_info, prompt_try, floor_device)
                if result not in ("margin", "floor"):
                    break
        else:
            result = try_fixture(spec, cfg_dict, model, fdir, tmp, o_gain, env_info)
        if result == "sensitivity" and attempt < 2:
            o_gain *= 1.6
            log(f"[{name}] sensitivity too low; retrying with o_proj gain {o_gain}")
            continue
        break
    shutil.rmtree(tmp, ignore_errors=True)
    return result


def write_checkpoint(spec, model, fdir, tmp, cfg_dict):
    """Saves the fixture directory; returns (stored tensors, reference dir, fp8 table)."""
    name = f"dsv32_{spec['name']}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(fdir, ignore_errors=True)
    os.makedirs(fdir)
    model.save_pretrained(tmp)
    saved_cfg = json.load(open(os.path.join(tmp, "config.json")))
    tensors = {}
    for f in sorted(os.listdir(tmp)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(tmp, f)))
    stored, reference, fp8_table = {}, {}, {}
    for k, v in tensors.items():
        if spec["storage"] == "fp8" and is_fp8_name(k):
            q, scale, deq = quantize_fp8_blocks(v)
            check = dequantize_fp8_blocks(q, scale)
            assert torch.equal(check, deq), k
            stored[k] = q.contiguous()
            stored[k + "_scale_inv"] = scale.contiguous()
            reference[k] = deq.contiguous()
            fp8_table[k] = {"shape": list(v.shape), "scale_grid": list(scale.shape),
                            "partial_rows": v.shape[0] % FP8_BLOCK, "partial_cols": v.shape[1] % FP8_BLOCK,
                            "rel_quant_error": rel(deq, v.float())}
        else:
            stored[k] = v.to(stored_dtype(spec, k)).contiguous()
            reference[k] = stored[k]
    save_file(stored, os.path.join(fdir, "model.safetensors"), metadata={"format": "pt"})

    if spec["rope_style"] == "saved":
        file_cfg = dict(saved_cfg)
        file_cfg.pop("transformers_version", None)
    else:
        file_cfg = copy.deepcopy(cfg_dict)
    if spec["storage"] == "fp8":
        file_cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                           "activation_scheme": "dynamic",
                                           "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    with open(os.path.join(fdir, "config.json"), "w") as f:
        json.dump(file_cfg, f, indent=2, sort_keys=True)
        f.write("\n")

    must = ["model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"]
    for i in range(spec["layers"]):
        p = f"model.layers.{i}."
        must += [p + s for s in (
            "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight",
            "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight",
            "self_attn.kv_b_proj.weight", "self_attn.o_proj.weight", "self_attn.indexer.wq_b.weight",
            "self_attn.indexer.wk.weight", "self_attn.indexer.k_norm.weight", "self_attn.indexer.k_norm.bias",
            "self_attn.indexer.weights_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight")]
        if i < spec["first_dense"]:
            must += [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"]
        else:
            must += [p + "mlp.gate.weight", p + "mlp.gate.e_score_correction_bias",
                     p + f"mlp.experts.{spec['experts'] - 1}.gate_proj.weight", p + "mlp.experts.0.up_proj.weight",
                     p + "mlp.experts.0.down_proj.weight", p + "mlp.shared_experts.down_proj.weight"]
    absent = [k for k in must if k not in stored]
    if absent:
        raise RuntimeError(f"{name}: checkpoint names missing from the saved file: {absent}")

    if spec["storage"] != "fp8":
        return stored, fdir, fp8_table
    # The reference: the same checkpoint with the dequantised fp32 weights and
    # no quantization_config (transformers then loads plain Linear weights).
    ref_dir = os.path.join(tmp, "reference")
    os.makedirs(ref_dir, exist_ok=True)
    save_file(reference, os.path.join(ref_dir, "model.safetensors"), metadata={"format": "pt"})
    ref_cfg = dict(file_cfg)
    ref_cfg.pop("quantization_config")
    with open(os.path.join(ref_dir, "config.json"), "w") as f:
        json.dump(ref_cfg, f, indent=2)
    return reference, ref_dir, fp8_table


def try_fixture(spec, cfg_dict, model, fdir, tmp, o_gain, env_info, gpu_prompt_try=None, floor_device=None):
    name = f"dsv32_{spec['name']}"
    gpu = spec.get("gpu", False)
    gen = torch.Generator().manual_seed(spec["seed"])
    init_weights(model, gen, o_gain, spec)
    model.eval()

    def prompt_ids(prompt_try):
        rng = np.random.default_rng(spec["seed"] * 1000 + prompt_try)
        prompt = rng.integers(3, spec["vocab"], size=spec["prompt_len"]).astype(np.int32)
        return prompt, torch.tensor(prompt[None].astype(np.int64))

    wide = None
    if gpu:
        round_to_bf16_values(model)
        _, fit_ids = prompt_ids(gpu_prompt_try)
        wide = fit_for_bf16(model, spec, fit_ids, fit_ids[:, :spec["gen_prompt_len"]], gpu_prompt_try, name)
    values, ref_dir, fp8_table = write_checkpoint(spec, model, fdir, tmp, cfg_dict)
    stored_meta = load_file(os.path.join(fdir, "model.safetensors"))
    log(f"[{name}] stored {len(stored_meta)} tensors; "
        f"{sum(v.numel() * v.element_size() for v in stored_meta.values())} bytes")

    ref, info = DeepseekV32ForCausalLM.from_pretrained(
        ref_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    ref.eval()
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        raise RuntimeError(f"{name}: from_pretrained loading info not clean: {bad}")
    errs = check_structure(ref, spec)
    if errs:
        raise RuntimeError(f"{name}: reloaded model has the wrong structure: {errs}")
    assert ref.config._attn_implementation == "eager", ref.config._attn_implementation
    # Bit-equal weights: the reloaded (packed) experts against the stored per-expert values.
    sd = {k: v.detach() for k, v in list(ref.named_parameters()) + list(ref.named_buffers())}
    worst = 0.0
    for k, v in values.items():
        want = v.float()
        if k in sd:
            got = sd[k].float()
        elif ".mlp.experts." in k:
            parts = k.split(".")
            e, proj = int(parts[5]), parts[6]
            base = ".".join(parts[:5])
            I = spec["moe_intermediate"]
            if proj == "down_proj":
                got = sd[base + ".down_proj"][e].float()
            else:
                gu = sd[base + ".gate_up_proj"][e].float()
                got = gu[:I] if proj == "gate_proj" else gu[I:]
        else:
            raise RuntimeError(f"{name}: {k} has no counterpart in the reloaded model")
        worst = max(worst, float((want - got).abs().max()))
    if worst != 0.0:
        raise RuntimeError(f"{name}: reloaded weights differ from the stored values by {worst}")

    def cheap_run(prompt_try):
        prompt, ids = prompt_ids(prompt_try)
        probe = Probe(ref)
        try:
            logits = logits_full(ref, ids)
            m_prompt = probe.take()
            new_tokens, gaps = greedy_manual(ref, ids[:, :spec["gen_prompt_len"]], spec["gen_new"])
            m_gen = probe.take()
        finally:
            probe.close()
        return prompt, ids, logits, new_tokens, gaps, {"prompt": m_prompt, "generate": m_gen}

    candidates = []  # (indexer margin, prompt try)
    for prompt_try in ([gpu_prompt_try] if gpu else range(PROMPT_TRIES)):
        _, _, _, _, gaps, margins = cheap_run(prompt_try)
        w = worst_margins(margins)
        log(f"[{name}] prompt try {prompt_try}: margins {json.dumps(w)}; greedy gap min {min(gaps):.3e}")
        ok = gpu_margins_ok(margins, gaps) if gpu else (margins_ok(margins) and min(gaps) >= GREEDY_GAP_MIN)
        if ok:
            candidates.append((w["index"], prompt_try))
        if (ok and w["index"] >= INDEX_MARGIN_GOOD) or (candidates and prompt_try + 1 >= SEARCH_TRIES):
            break
    chosen = None
    for _, prompt_try in sorted(candidates, reverse=True):
        prompt, ids, logits, new_tokens, gaps, margins = cheap_run(prompt_try)
        gen_ids = ids[:, :spec["gen_prompt_len"]]
        # Only the chosen prompt pays for the long prefill + decode run.
        split_n = 65
        probe = Probe(ref)
        try:
            logits_split_ref = logits_split(ref, ids, split_n)
            margins[f"split_{split_n}"] = probe.take()
        finally:
            probe.close()
        log(f"[{name}] prompt try {prompt_try}: with decode {json.dumps(worst_margins(margins))}")
        if gpu_margins_ok(margins, gaps) if gpu else margins_ok(margins):
            chosen = prompt_try
            break
    if chosen is None and gpu:
        log(f"[{name}] prompt try {gpu_prompt_try}: margins too small after the fit; new prompt")
        return "margin"
    if chosen is None:
        raise RuntimeError(f"{name}: no prompt with robust margins in {PROMPT_TRIES} tries")
    prompt_try = chosen
    m_prompt = margins["prompt"]
    if m_prompt["index_rows"] == 0:
        raise RuntimeError(f"{name}: the indexer never had more than index_topk keys")

    logits_cached = logits_full(ref, ids, use_cache=True)
    with with_dense_indexer(ref, range(spec["layers"])):
        logits_dense = logits_full(ref, ids)
    dense_diff = rel(logits_dense, logits)
    log(f"[{name}] sparse vs dense attention: relative logit difference {dense_diff:.4f}")
    if dense_diff < DENSE_DIFF_MIN:
        raise RuntimeError(f"{name}: the indexer's selection barely matters ({dense_diff})")
    try:
        gen_tokens = greedy_generate(ref, gen_ids, spec["gen_new"])
        generate_matches = gen_tokens == new_tokens
        generate_note = "model.generate(do_sample=False) ran"
    except Exception as e:  # noqa: BLE001
        gen_tokens, generate_matches = None, None
        generate_note = f"model.generate failed: {e!r}"
    log(f"[{name}] greedy manual={new_tokens} generate={gen_tokens}")
    layer_out = layer_outputs(ref, ids)
    sens = sensitivities(ref, ids, logits)
    log(f"[{name}] sensitivities: {json.dumps(sens)}")
    sens_ok = all(s["o_proj"] > SENSITIVITY_MIN and s["dense_indexer"] > LAYER_DENSE_DIFF_MIN for s in sens)

    np.save(os.path.join(fdir, "prompt.npy"), prompt)
    np.save(os.path.join(fdir, "logits.npy"), logits.numpy().astype(np.float32))
    np.save(os.path.join(fdir, "generate.npy"),
            np.concatenate([prompt[:spec["gen_prompt_len"]], np.array(new_tokens, dtype=np.int32)]))
    np.save(os.path.join(fdir, "layer_out.npy"), layer_out.numpy().astype(np.float32))
    rot = ref.model.rotary_emb
    meta = {
        "fixture": name,
        "spec": spec,
        "env": env_info,
        "structure": describe(ref),
        "rope": {"rope_type": rot.rope_type, "inv_freq": [float(x) for x in rot.inv_freq.tolist()],
                 "attention_scaling": float(rot.attention_scaling),
                 "softmax_scale": float(ref.model.layers[0].self_attn.scaling),
                 "config_rope_parameters": ref.config.rope_parameters},
        "o_proj_init_gain": o_gain,
        "prompt_seed_try": prompt_try,
        "special_ids": {"bos": BOS, "eos": EOS, "pad": PAD},
        "reference": ("from_pretrained(dir, dtype=float32, attn_implementation='eager'), CPU; "
                      + ("dir = a copy with the dequantised fp32 weights" if spec["storage"] == "fp8"
                         else "dir = the fixture directory")),
        "logits_shape": list(logits.shape),
        "logits_rms": float(logits.pow(2).mean().sqrt()),
        "generate": {"prompt_len": spec["gen_prompt_len"], "new_tokens": new_tokens,
                     "top1_top2_gaps": gaps, "via": "manual greedy loop with cache",
                     "model_generate_tokens": gen_tokens, "model_generate_matches": generate_matches,
                     "note": generate_note},
        "self_consistency": {"rel_use_cache_true_vs_false": rel(logits_cached, logits),
                             f"rel_prefill_{split_n}_then_decode_vs_full": rel(logits_split_ref, logits)},
        "sparse_vs_dense": {"rel_logit_difference_all_layers_dense": dense_diff,
                            "required_min": DENSE_DIFF_MIN},
        "margins": {"thresholds": ({"index": GPU_INDEX_MARGIN_MIN, "routing": GPU_ROUTING_MARGIN_MIN,
                                    "group": GPU_ROUTING_MARGIN_MIN, "greedy_gap": GPU_GREEDY_GAP_MIN}
                                   if gpu else
                                   {"index": INDEX_MARGIN_MIN, "routing": ROUTING_MARGIN_MIN,
                                    "group": GROUP_MARGIN_MIN, "greedy_gap": GREEDY_GAP_MIN}),
                    "worst": worst_margins(margins), "greedy_gap_min": min(gaps),
                    "note": "relative to the row's largest |value|; index: k-th minus (k+1)-th "
                            "indexer score over queries with more than index_topk causal keys; "
                            "group: topk_group-th minus next group score; routing: top_k-th minus "
                            "next biased score among eligible experts",
                    **margins},
        "perturbation": {"factor": PERTURB, "required_min_rel_change_o_proj": SENSITIVITY_MIN,
                         "required_min_rel_change_dense_indexer": LAYER_DENSE_DIFF_MIN,
                         "ok": sens_ok, "per_layer": sens},
        "fp8": fp8_table,
        "tensors": {k: [str(v.dtype).replace("torch.", ""), list(v.shape)] for k, v in sorted(stored_meta.items())},
        "layer_out_note": "layer_out.npy[l] = hidden state after decoder layer l (before the final norm), "
                          "full prompt, one forward",
    }
    for fn in ("config.json", "model.safetensors", "prompt.npy", "logits.npy", "generate.npy", "layer_out.npy"):
        meta.setdefault("sha256", {})[fn] = sha256(os.path.join(fdir, fn))
    floor_ok = True
    if gpu:
        meta["wide_selection"] = wide
        if not floor_device:
            raise RuntimeError(f"{name}: a GPU fixture needs its bf16 floor (--floor-device)")
        fl = bf16_floor(fdir, prompt, logits.numpy(), floor_device)
        meta.update(fl)
        floor_ok = fl["bf16_floor_l2_rel"] <= GPU_FLOOR_MAX
        log(f"[{name}] bf16 floor {fl['bf16_floor_l2_rel']:.4g} on {floor_device}: {json.dumps(fl['bf16_floor'])}")
    with open(os.path.join(fdir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True, default=str, allow_nan=False)
        f.write("\n")
    log(f"[{name}] self-consistency {json.dumps(meta['self_consistency'])}; sensitivity ok={sens_ok}")
    if not sens_ok:
        return "sensitivity"
    if not floor_ok:
        log(f"[{name}] bf16 floor above {GPU_FLOOR_MAX}; new prompt")
        return "floor"
    return "ok"


# ----------------------------------------------------------------------------- main

def environment():
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as md
    info = {"transformers": transformers.__version__, "torch": torch.__version__,
            "numpy": np.__version__, "python": platform.python_version(),
            "modeling_file": inspect.getsourcefile(md), "device": "cpu",
            "threads": torch.get_num_threads(), "machine": platform.node()}
    info["modeling_sha256"] = hashlib.sha256(inspect.getsource(md).encode()).hexdigest()
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="a,b,c", help="fixtures to build (default a,b,c; g1,g2 are the GPU ones)")
    ap.add_argument("--floor-device", default="cuda",
                    help="where transformers' bf16 noise floor of the GPU fixtures is measured (cuda or cpu)")
    args = ap.parse_args()
    if args.floor_device.startswith("cuda") and not torch.cuda.is_available() and any(
            n.startswith("g") for n in args.only.split(",")):
        raise SystemExit("--floor-device cuda: no GPU visible (use --floor-device cpu)")
    torch.set_grad_enabled(False)
    os.makedirs(args.out, exist_ok=True)
    env_info = environment()
    log(f"environment: {json.dumps(env_info)}")
    only = set(filter(None, args.only.split(",")))
    results = {}
    for spec in FIXTURES:
        if only and spec["name"] not in only:
            continue
        try:
            results[spec["name"]] = build_fixture(spec, args.out, env_info, args.floor_device)
        except Exception:  # noqa: BLE001 - keep going so one call yields the others
            traceback.print_exc()
            results[spec["name"]] = "error"
    log(f"results: {results}")
    return 0 if all(v == "ok" for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
