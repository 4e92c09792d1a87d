#!/usr/bin/env python3
"""Writes tests/data/configs/<arch>_<form>/: config.json files as transformers
(and the published checkpoints) write them, plus expected.json, what
transformers 5.17 reads out of each.

Strata must load a config.json however it was written: by the checkpoint's
authors (the Hub), by transformers 4.x, or by transformers 5.17's
save_pretrained after a fine-tune. transformers_config_test.cc loads every
directory here and compares the parsed values with expected.json, which is not
written by hand: it is read off the config object that
`<ConfigClass>.from_pretrained(dir)` (transformers 5.17) builds from the very
file, so it says what the parity reference makes of it.

Forms (the directory suffix):
  v5        5.17 config class built from its own field names
            (layer_types, rope_parameters, ...) and save_pretrained: what a
            model created or fine-tuned with transformers 5.x carries.
  v5_derived
            the same, but leaving the per-layer lists to the class, which
            derives them from its defaults (first_k_dense_replace, the
            attention interval).
  legacy    5.17 config class built from the published checkpoint's keys
            (rope_theta / rope_scaling at the top level, Moonshot's
            linear_attn_config, full_attention_interval, ...), then
            save_pretrained: a Hub checkpoint loaded and saved again with
            5.17. 5.17 converts what it knows (rope_parameters, layer_types)
            and keeps the keys it does not know verbatim.
  hub       the published checkpoint's key set itself (Kimi-Linear-48B-A3B,
            DeepSeek-V3.2-Exp, Qwen3-Next-80B-A3B, scaled down), written with
            json.dump because no transformers version writes it: Moonshot's
            and DeepSeek's remote code and the Qwen team's tooling did.
  v4_57     (qwen3_next) written by transformers 4.57.1's save_pretrained,
            the first release with Qwen3-Next and the one its Hub configs
            name: layer_types next to rope_theta / partial_rotary_factor at the
            top level. Run this script with a 4.57.1 install to (re)write it.
  from_<fixture>
            an existing parity fixture's config (tests/data/<fixture>)
            loaded and saved again by 5.17; the test runs that fixture's
            weights with it and expects the fixture's own logits.
  demo, minimal (strata_hybrid)
            Strata's own architecture has no transformers config class; its
            config is the dict tools/demo_model/strata_hybrid_config.py's
            make_config builds (demo: every key, as save_checkpoint writes
            it) or only the required keys (minimal: load_config fills the
            rest, and Strata must fill them the same way).

Usage (from the repository root):
  .venv-ref/bin/python tools/reference/make_config_fixtures.py
  /path/to/transformers-4.57.1/bin/python tools/reference/make_config_fixtures.py
  .venv-ref/bin/python tools/reference/make_config_fixtures.py   # again: expected.json of v4_57

With 5.17 it writes every 5.17 form and then expected.json for every directory
under --out (the v4_57 one included); with 4.57 it writes only the v4_57
config.json. No torch is needed: only the config classes are used.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile

import transformers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "demo_model"))
import strata_hybrid_config as shc  # noqa: E402

BOS, EOS, PAD = 1, 2, 0


# ----------------------------------------------------------------------------- kimi_linear

def kimi_v5():
    # Odd head counts, MLA at layers 1 and 4, a dense layer after a MoE one,
    # two shared experts, no renormalisation: each value differs from the
    # class default so a reader that falls back to a default is caught.
    from transformers import KimiLinearConfig
    return KimiLinearConfig(
        vocab_size=320, hidden_size=80, num_hidden_layers=5,
        layer_types=["linear_attention", "full_attention", "linear_attention",
                     "linear_attention", "full_attention"],
        mlp_layer_types=["dense", "sparse", "sparse", "dense", "sparse"],
        linear_num_heads=3, linear_head_dim=24, linear_conv_kernel_dim=3,
        num_attention_heads=5, num_key_value_heads=5, q_lora_rank=None, kv_lora_rank=40,
        qk_nope_head_dim=24, qk_rope_head_dim=8, v_head_dim=20,
        intermediate_size=96, moe_intermediate_size=16, num_local_experts=7,
        num_experts_per_tok=3, n_shared_experts=2, norm_topk_prob=False,
        routed_scaling_factor=1.5, n_group=1, topk_group=1,
        max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)


def kimi_v5_derived():
    # No per-layer lists: the class makes layer i full attention iff
    # i > 0 and i % 4 == 0, and the first layer dense. A list of end tokens.
    from transformers import KimiLinearConfig
    return KimiLinearConfig(
        vocab_size=256, hidden_size=64, num_hidden_layers=6,
        linear_num_heads=5, linear_head_dim=16,
        num_attention_heads=3, num_key_value_heads=3, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        intermediate_size=128, moe_intermediate_size=32, num_local_experts=5,
        num_experts_per_tok=2, max_position_embeddings=4096,
        bos_token_id=BOS, eos_token_id=[EOS, 5], pad_token_id=PAD)


def kimi_hub():
    """Kimi-Linear-48B-A3B-Instruct's config.json key set (Moonshot's
    configuration_kimi.py), scaled down: MLA at 1-based layers 2 and 5."""
    return {
        "architectures": ["KimiLinearForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_kimi.KimiLinearConfig",
            "AutoModel": "modeling_kimi.KimiLinearModel",
            "AutoModelForCausalLM": "modeling_kimi.KimiLinearForCausalLM",
        },
        "model_type": "kimi_linear",
        "vocab_size": 288, "hidden_size": 72, "num_hidden_layers": 5,
        "linear_attn_config": {"kda_layers": [1, 3, 4], "full_attn_layers": [2, 5],
                               "head_dim": 24, "num_heads": 3, "short_conv_kernel_size": 4},
        "num_attention_heads": 3, "num_key_value_heads": 3, "head_dim": 72,
        "q_lora_rank": None, "kv_lora_rank": 48,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 24,
        "mla_use_nope": True, "rope_theta": 10000.0, "rope_scaling": None,
        "hidden_act": "silu", "intermediate_size": 144, "first_k_dense_replace": 2,
        "moe_layer_freq": 1, "num_experts": 6, "num_experts_per_token": 2,
        "moe_intermediate_size": 24, "num_shared_experts": 1,
        "moe_router_activation_func": "sigmoid", "moe_renormalize": True,
        "routed_scaling_factor": 2.446, "use_grouped_topk": True, "num_expert_group": 1,
        "topk_group": 1, "rms_norm_eps": 1e-5, "model_max_length": 1048576,
        "initializer_range": 0.02, "tie_word_embeddings": False,
        "bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD,
        "num_nextn_predict_layers": 0, "use_cache": True, "dtype": "bfloat16",
        "transformers_version": "4.56.2",
    }


def common_expected(c):
    """What every transformers config class holds under the same names."""
    return {
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
        "num_layers": c.num_hidden_layers, "rms_norm_eps": c.rms_norm_eps,
        "tie_word_embeddings": c.tie_word_embeddings,
        "max_context": c.max_position_embeddings,
        "bos_token_id": c.bos_token_id, "eos_token_id": first_id(c.eos_token_id),
    }


def kimi_expected(c):
    # attribute_map: max_position_embeddings reads model_max_length.
    return {
        **common_expected(c),
        "is_mla": [t == "full_attention" for t in c.layer_types],
        "is_moe": [t == "sparse" for t in c.mlp_layer_types],
        "kda_heads": c.linear_num_heads, "kda_head_dim": c.linear_head_dim,
        "conv_kernel": c.linear_conv_kernel_dim,
        "mla_heads": c.num_attention_heads, "kv_lora_rank": c.kv_lora_rank,
        "qk_nope_dim": c.qk_nope_head_dim, "qk_rope_dim": c.qk_rope_head_dim,
        "v_head_dim": c.v_head_dim,
        "intermediate_size": c.intermediate_size,
        "moe_intermediate_size": c.moe_intermediate_size,
        # KimiLinearExperts / KimiLinearTopkRouter / KimiLinearMoE read these.
        "num_experts": c.num_local_experts, "experts_per_token": c.num_experts_per_tok,
        "num_shared_experts": c.n_shared_experts, "moe_renormalize": c.norm_topk_prob,
        "routed_scaling_factor": c.routed_scaling_factor,
    }


# ----------------------------------------------------------------------------- deepseek_v32

def dsv32_v5():
    # YaRN in rope_parameters; a custom mlp_layer_types, beside which 5.17
    # writes the class default first_k_dense_replace = 3 it does not use.
    from transformers import DeepseekV32Config
    return DeepseekV32Config(
        vocab_size=352, hidden_size=72, num_hidden_layers=4,
        mlp_layer_types=["dense", "sparse", "dense", "sparse"],
        num_attention_heads=3, num_key_value_heads=3, q_lora_rank=40, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=24,
        rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 8.0,
                         "original_max_position_embeddings": 512, "beta_fast": 24.0,
                         "beta_slow": 2.0, "mscale": 0.5, "mscale_all_dim": 0.75},
        max_position_embeddings=4096,
        index_n_heads=5, index_head_dim=24, index_topk=48,
        intermediate_size=112, moe_intermediate_size=24, n_routed_experts=10,
        num_experts_per_tok=3, n_shared_experts=2, n_group=5, topk_group=3,
        norm_topk_prob=False, routed_scaling_factor=1.75, rms_norm_eps=1e-5,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)


def dsv32_v5_derived():
    # The default RoPE (rope_parameters filled in by the class), dense
    # layers from first_k_dense_replace.
    from transformers import DeepseekV32Config
    return DeepseekV32Config(
        vocab_size=256, hidden_size=48, num_hidden_layers=3, first_k_dense_replace=1,
        num_attention_heads=5, num_key_value_heads=5, q_lora_rank=24, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, max_position_embeddings=2048,
        index_n_heads=3, index_head_dim=16, index_topk=16,
        intermediate_size=64, moe_intermediate_size=16, n_routed_experts=8,
        num_experts_per_tok=2, n_group=4, topk_group=2,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)


def dsv32_hub():
    """DeepSeek-V3.2-Exp's config.json key set (FP8 block-quantised, YaRN in a
    legacy rope_scaling with "type"), scaled down."""
    return {
        "architectures": ["DeepseekV32ForCausalLM"],
        "model_type": "deepseek_v32",
        "vocab_size": 320, "hidden_size": 96, "intermediate_size": 160,
        "moe_intermediate_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 3, "num_key_value_heads": 3,
        "n_shared_experts": 1, "n_routed_experts": 12, "ep_size": 1,
        "routed_scaling_factor": 2.5, "kv_lora_rank": 48, "q_lora_rank": 64,
        "qk_rope_head_dim": 16, "v_head_dim": 32, "qk_nope_head_dim": 32,
        "topk_method": "noaux_tc", "n_group": 4, "topk_group": 2, "num_experts_per_tok": 3,
        "moe_layer_freq": 1, "first_k_dense_replace": 1, "norm_topk_prob": True,
        "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840,
        "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True,
        "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": False,
        "rope_theta": 10000,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                         "type": "yarn"},
        "attention_bias": False, "attention_dropout": 0.0,
        "index_n_heads": 15, "index_head_dim": 32, "index_topk": 32,
        "num_nextn_predict_layers": 1,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8", "weight_block_size": [32, 32]},
        "torch_dtype": "bfloat16", "transformers_version": "4.44.2",
    }


def yarn_get_mscale(scale, mscale):
    # modeling_deepseek_v32.yarn_get_mscale (that module needs torch).
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(rp):
    # modeling_rope_utils._compute_yarn_parameters (needs torch): the factor
    # cos and sin are multiplied by.
    factor = rp["factor"]
    if rp.get("attention_factor") is not None:
        return rp["attention_factor"]
    if rp.get("mscale") and rp.get("mscale_all_dim"):
        return yarn_get_mscale(factor, rp["mscale"]) / yarn_get_mscale(factor, rp["mscale_all_dim"])
    return yarn_get_mscale(factor, 1)


def dsv32_expected(c):
    rp = c.rope_parameters
    rope_type = rp["rope_type"]
    out = {
        **common_expected(c),
        "num_heads": c.num_attention_heads, "q_lora_rank": c.q_lora_rank,
        "kv_lora_rank": c.kv_lora_rank, "qk_nope_dim": c.qk_nope_head_dim,
        "qk_rope_dim": c.qk_rope_head_dim, "v_head_dim": c.v_head_dim,
        "index_heads": c.index_n_heads, "index_head_dim": c.index_head_dim,
        "index_topk": c.index_topk,
        "is_moe": [t == "sparse" for t in c.mlp_layer_types],
        "intermediate_size": c.intermediate_size,
        "moe_intermediate_size": c.moe_intermediate_size,
        "num_experts": c.num_local_experts, "experts_per_token": c.num_experts_per_tok,
        "num_shared_experts": c.n_shared_experts, "n_group": c.n_group,
        "topk_group": c.topk_group, "norm_topk_prob": c.norm_topk_prob,
        "routed_scaling_factor": c.routed_scaling_factor,
        "rope_type": rope_type, "rope_theta": rp["rope_theta"],
        # DeepseekV32Attention.scaling = yarn_apply_mscale(rope_parameters, qk_head_dim ** -0.5).
        "softmax_scale": (c.qk_nope_head_dim + c.qk_rope_head_dim) ** -0.5,
    }
    if rope_type != "default" and rp.get("mscale_all_dim"):
        out["softmax_scale"] *= yarn_get_mscale(rp["factor"], rp["mscale_all_dim"]) ** 2
    if rope_type == "yarn":
        # What modeling_rope_utils._compute_yarn_parameters reads.
        out.update({
            "rope_factor": rp["factor"],
            "rope_original_max_position": rp["original_max_position_embeddings"],
            "rope_beta_fast": rp.get("beta_fast") or 32,
            "rope_beta_slow": rp.get("beta_slow") or 1,
            "rope_mscale": rp.get("mscale") or 0.0,
            "rope_mscale_all_dim": rp.get("mscale_all_dim") or 0.0,
            "rope_attention_factor": yarn_attention_factor(rp),
        })
    q = getattr(c, "quantization_config", None)
    out["fp8"] = bool(q)
    if q and q.get("weight_block_size"):
        out["fp8_block"] = list(q["weight_block_size"])
    return out


# ----------------------------------------------------------------------------- qwen3_next

def qwen_v5():
    # rope_parameters with its own partial_rotary_factor: 5.17 also writes the
    # class's backward-compatibility default (0.25) at the top level, which
    # it never reads once rope_parameters has one.
    from transformers import Qwen3NextConfig
    return Qwen3NextConfig(
        vocab_size=288, hidden_size=80, num_hidden_layers=5,
        layer_types=["linear_attention", "full_attention", "linear_attention",
                     "linear_attention", "full_attention"],
        num_attention_heads=3, num_key_value_heads=1, head_dim=20,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                         "partial_rotary_factor": 0.5},
        linear_num_key_heads=3, linear_num_value_heads=9, linear_key_head_dim=16,
        linear_value_head_dim=8, linear_conv_kernel_dim=3,
        intermediate_size=112, moe_intermediate_size=24, shared_expert_intermediate_size=40,
        num_experts=7, num_experts_per_tok=3, norm_topk_prob=False,
        decoder_sparse_step=1, mlp_only_layers=[3], max_position_embeddings=8192,
        rms_norm_eps=1e-5, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)


def qwen_v5_derived():
    # Nothing about RoPE or the layer pattern: the class fills in
    # rope_theta 10000, partial_rotary_factor 0.25 and every 4th layer full.
    # decoder_sparse_step 2: odd layers dense.
    from transformers import Qwen3NextConfig
    return Qwen3NextConfig(
        vocab_size=256, hidden_size=64, num_hidden_layers=8,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=1, linear_num_value_heads=3, linear_key_head_dim=16,
        linear_value_head_dim=16,
        intermediate_size=96, moe_intermediate_size=16, shared_expert_intermediate_size=32,
        num_experts=6, num_experts_per_tok=2, decoder_sparse_step=2)


def qwen_hub():
    """Qwen3-Next-80B-A3B-Instruct's config.json key set, scaled down."""
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "vocab_size": 320, "hidden_size": 96, "intermediate_size": 128,
        "num_hidden_layers": 6, "num_attention_heads": 6, "num_key_value_heads": 2,
        "head_dim": 24, "hidden_act": "silu", "max_position_embeddings": 262144,
        "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True,
        "tie_word_embeddings": False, "rope_theta": 10000000, "rope_scaling": None,
        "partial_rotary_factor": 0.25, "attention_bias": False, "attention_dropout": 0.0,
        "full_attention_interval": 3, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 16, "linear_value_head_dim": 24,
        "linear_num_key_heads": 3, "linear_num_value_heads": 6,
        "decoder_sparse_step": 1, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48, "num_experts_per_tok": 3, "num_experts": 9,
        "norm_topk_prob": True, "output_router_logits": False, "router_aux_loss_coef": 0.001,
        "mlp_only_layers": [], "use_sliding_window": False, "sliding_window": None,
        "bos_token_id": BOS, "eos_token_id": EOS,
        "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0",
    }


def qwen_is_moe(c):
    # Qwen3NextDecoderLayer's choice of Qwen3NextSparseMoeBlock (needs torch).
    return [(i not in c.mlp_only_layers) and c.num_experts > 0
            and (i + 1) % c.decoder_sparse_step == 0 for i in range(c.num_hidden_layers)]


def qwen_expected(c):
    rp = c.rope_parameters
    return {
        **common_expected(c),
        "is_attention": [t == "full_attention" for t in c.layer_types],
        "is_moe": qwen_is_moe(c),
        "linear_key_heads": c.linear_num_key_heads,
        "linear_value_heads": c.linear_num_value_heads,
        "linear_key_dim": c.linear_key_head_dim, "linear_value_dim": c.linear_value_head_dim,
        "conv_kernel": c.linear_conv_kernel_dim,
        "num_heads": c.num_attention_heads, "num_kv_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        # compute_default_rope_parameters: dim = int(head_dim * partial_rotary_factor).
        "rotary_dim": int(c.head_dim * rp.get("partial_rotary_factor", 1.0)),
        "rope_theta": rp["rope_theta"],
        "intermediate_size": c.intermediate_size,
        "moe_intermediate_size": c.moe_intermediate_size,
        "shared_intermediate_size": c.shared_expert_intermediate_size,
        "num_experts": c.num_experts, "experts_per_token": c.num_experts_per_tok,
        "norm_topk_prob": c.norm_topk_prob,
    }


# ----------------------------------------------------------------------------- strata_hybrid

def hybrid_demo():
    return shc.make_config(
        vocab_size=300, hidden_size=48, num_hidden_layers=5,
        layer_types=["kda", "dsa", "kda", "kda", "dsa"],
        mlp_layer_types=["moe", "dense", "moe", "dense", "moe"],
        linear_num_heads=3, linear_head_dim=16, linear_conv_kernel_dim=3,
        num_attention_heads=3, q_lora_rank=40, kv_lora_rank=24, qk_nope_head_dim=8,
        qk_rope_head_dim=8, v_head_dim=16, rope_theta=500000.0,
        index_n_heads=5, index_head_dim=16, index_topk=24,
        intermediate_size=80, moe_intermediate_size=24, n_routed_experts=9,
        num_experts_per_tok=2, n_shared_experts=2, n_group=3, topk_group=2,
        norm_topk_prob=False, routed_scaling_factor=1.25, rms_norm_eps=1e-5,
        max_position_embeddings=2048, bos_token_id=None, eos_token_id=EOS, pad_token_id=PAD)


def hybrid_minimal():
    return {"model_type": shc.MODEL_TYPE, "vocab_size": 200, "hidden_size": 64,
            "num_hidden_layers": 3, "layer_types": ["dsa", "kda", "dsa"],
            "mlp_layer_types": ["dense", "moe", "moe"]}


def hybrid_expected(c):
    return {
        "vocab_size": c["vocab_size"], "hidden_size": c["hidden_size"],
        "num_layers": c["num_hidden_layers"], "rms_norm_eps": c["rms_norm_eps"],
        "tie_word_embeddings": c["tie_word_embeddings"],
        "max_context": c["max_position_embeddings"],
        "bos_token_id": c["bos_token_id"], "eos_token_id": c["eos_token_id"],
        "is_dsa": [t == "dsa" for t in c["layer_types"]],
        "is_moe": [t == "moe" for t in c["mlp_layer_types"]],
        "kda_heads": c["linear_num_heads"], "kda_head_dim": c["linear_head_dim"],
        "conv_kernel": c["linear_conv_kernel_dim"],
        "num_heads": c["num_attention_heads"], "q_lora_rank": c["q_lora_rank"],
        "kv_lora_rank": c["kv_lora_rank"], "qk_nope_dim": c["qk_nope_head_dim"],
        "qk_rope_dim": c["qk_rope_head_dim"], "v_head_dim": c["v_head_dim"],
        "rope_theta": c["rope_theta"], "index_heads": c["index_n_heads"],
        "index_head_dim": c["index_head_dim"], "index_topk": c["index_topk"],
        "intermediate_size": c["intermediate_size"],
        "moe_intermediate_size": c["moe_intermediate_size"],
        "num_experts": c["n_routed_experts"], "experts_per_token": c["num_experts_per_tok"],
        "num_shared_experts": c["n_shared_experts"], "n_group": c["n_group"],
        "topk_group": c["topk_group"], "norm_topk_prob": c["norm_topk_prob"],
        "routed_scaling_factor": c["routed_scaling_factor"],
    }


# ----------------------------------------------------------------------------- writing

def first_id(v):
    """transformers allows a list of end tokens; Strata keeps the first."""
    if isinstance(v, list):
        return v[0] if v else None
    return v


def config_class(model_type):
    from transformers import DeepseekV32Config, KimiLinearConfig, Qwen3NextConfig
    return {"kimi_linear": KimiLinearConfig, "deepseek_v32": DeepseekV32Config,
            "qwen3_next": Qwen3NextConfig}[model_type]


def from_dict(model_type, d):
    """The config class built from a checkpoint's dict, as from_pretrained
    does (model_type and architectures are not constructor arguments)."""
    d = dict(d)
    d.pop("model_type", None)
    return config_class(model_type).from_dict(d)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def save(out, name, config):
    """save_pretrained into <out>/<name>; only config.json is kept."""
    d = os.path.join(out, name)
    with tempfile.TemporaryDirectory() as tmp:
        config.save_pretrained(tmp)
        os.makedirs(d, exist_ok=True)
        shutil.copyfile(os.path.join(tmp, "config.json"), os.path.join(d, "config.json"))
    print("wrote", os.path.relpath(os.path.join(d, "config.json"), REPO))


def dump(out, name, cfg):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "config.json"), cfg)
    print("wrote", os.path.relpath(os.path.join(d, "config.json"), REPO))


def write_v4_57(out):
    from transformers import Qwen3NextConfig
    hub = qwen_hub()
    hub.pop("model_type")
    save(out, "qwen3_next_v4_57", Qwen3NextConfig(**hub))


def write_v5(out, data):
    save(out, "kimi_linear_v5", kimi_v5())
    save(out, "kimi_linear_v5_derived", kimi_v5_derived())
    save(out, "kimi_linear_legacy", from_dict("kimi_linear", kimi_hub()))
    dump(out, "kimi_linear_hub", kimi_hub())

    save(out, "deepseek_v32_v5", dsv32_v5())
    save(out, "deepseek_v32_v5_derived", dsv32_v5_derived())
    save(out, "deepseek_v32_legacy", from_dict("deepseek_v32", dsv32_hub()))
    dump(out, "deepseek_v32_hub", dsv32_hub())

    save(out, "qwen3_next_v5", qwen_v5())
    save(out, "qwen3_next_v5_derived", qwen_v5_derived())
    save(out, "qwen3_next_legacy", from_dict("qwen3_next", qwen_hub()))
    dump(out, "qwen3_next_hub", qwen_hub())

    for fixture, arch in (("kimi_a", "kimi_linear"), ("dsv32_a", "deepseek_v32"),
                          ("qwen3next_a", "qwen3_next")):
        src = os.path.join(data, fixture)
        save(out, f"{arch}_from_{fixture}", config_class(arch).from_pretrained(src))

    dump(out, "strata_hybrid_demo", hybrid_demo())
    dump(out, "strata_hybrid_minimal", hybrid_minimal())


# Values only a kind of layer reads, by the per-layer flag that picks it:
# (flag, value when the layer has it, keys). Strata parses them only where a
# layer uses them, so expected.json leaves them out when no layer does.
KIND_KEYS = [
    ("is_mla", True, ["mla_heads", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim"]),
    ("is_mla", False, ["kda_heads", "kda_head_dim", "conv_kernel"]),
    ("is_dsa", True, ["num_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim",
                      "v_head_dim", "rope_theta", "index_heads", "index_head_dim", "index_topk"]),
    ("is_dsa", False, ["kda_heads", "kda_head_dim", "conv_kernel"]),
    ("is_attention", True, ["num_heads", "num_kv_heads", "head_dim", "rotary_dim",
                            "rope_theta"]),
    ("is_attention", False, ["linear_key_heads", "linear_value_heads", "linear_key_dim",
                             "linear_value_dim", "conv_kernel"]),
    ("is_moe", False, ["intermediate_size"]),
    ("is_moe", True, ["moe_intermediate_size", "shared_intermediate_size", "num_experts",
                      "experts_per_token", "num_shared_experts", "moe_renormalize",
                      "routed_scaling_factor", "n_group", "topk_group", "norm_topk_prob"]),
]


def drop_unused(values):
    for flag, kind, keys in KIND_KEYS:
        if flag in values and kind not in values[flag]:
            for key in keys:
                values.pop(key, None)


def write_expected(out):
    expect = {"kimi_linear": kimi_expected, "deepseek_v32": dsv32_expected,
              "qwen3_next": qwen_expected}
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        path = os.path.join(d, "config.json")
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            model_type = json.load(f)["model_type"]
        if model_type == shc.MODEL_TYPE:
            values = hybrid_expected(shc.load_config(path))
        else:
            values = expect[model_type](config_class(model_type).from_pretrained(d))
        drop_unused(values)
        values["model_type"] = model_type
        values["reference"] = (f"strata_hybrid_config.load_config" if model_type == shc.MODEL_TYPE
                               else f"transformers {transformers.__version__}")
        write_json(os.path.join(d, "expected.json"), values)
        print("wrote", os.path.relpath(os.path.join(d, "expected.json"), REPO))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "configs"))
    ap.add_argument("--data", default=os.path.join(REPO, "tests", "data"),
                    help="where the parity fixtures (kimi_a, dsv32_a, qwen3next_a) are")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    version = transformers.__version__
    if version.startswith("4.57."):
        write_v4_57(args.out)
    elif version == "5.17.0":
        write_v5(args.out, args.data)
        write_expected(args.out)
    else:
        sys.exit(f"transformers {version}: expected 5.17.0 (or 4.57.x for the v4_57 form)")


if __name__ == "__main__":
    main()
