"""The strata_hybrid config.json: its keys, their defaults and the reader.

Kept apart from strata_hybrid.py (which needs torch) so that tools that only
write or read configs, such as tools/reference/make_config_fixtures.py, run
with transformers alone. load_config is the reference reader: a key absent
from config.json takes its CONFIG_KEYS default, and src/model/models/
strata_hybrid_config.cc defaults the same way.
"""
import json

MODEL_TYPE = "strata_hybrid"

# Every key of config.json with its default (None: required).
CONFIG_KEYS = {
    "vocab_size": None, "hidden_size": None, "num_hidden_layers": None,
    "layer_types": None,          # per layer: "kda" | "dsa"
    "mlp_layer_types": None,      # per layer: "dense" | "moe"
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "max_position_embeddings": 4096,
    "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
    # KDA
    "linear_num_heads": 2, "linear_head_dim": 32, "linear_conv_kernel_dim": 4,
    # DSA
    "num_attention_heads": 2, "q_lora_rank": 48, "kv_lora_rank": 32,
    "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 16, "rope_theta": 10000.0,
    "index_n_heads": 2, "index_head_dim": 32, "index_topk": 64,
    # FFN
    "intermediate_size": 256, "moe_intermediate_size": 64, "n_routed_experts": 8,
    "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 2, "topk_group": 1,
    "norm_topk_prob": True, "routed_scaling_factor": 1.0,
    "initializer_range": 0.02,
}


def make_config(**kw):
    """A complete strata_hybrid config dict (defaults filled, checked)."""
    unknown = set(kw) - set(CONFIG_KEYS)
    if unknown:
        raise ValueError(f"unknown strata_hybrid config keys: {sorted(unknown)}")
    cfg = {k: kw.get(k, v) for k, v in CONFIG_KEYS.items()}
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "layer_types",
                           "mlp_layer_types") if cfg[k] is None]
    if missing:
        raise ValueError(f"strata_hybrid config needs {missing}")
    L = cfg["num_hidden_layers"]
    for key, kinds in (("layer_types", ("kda", "dsa")), ("mlp_layer_types", ("dense", "moe"))):
        if len(cfg[key]) != L or any(t not in kinds for t in cfg[key]):
            raise ValueError(f"{key} must list {L} entries from {kinds}: {cfg[key]}")
    cfg["model_type"] = MODEL_TYPE
    cfg["architectures"] = ["StrataHybridForCausalLM"]
    return cfg


def load_config(path):
    with open(path) as f:
        raw = json.load(f)
    raw = {k: v for k, v in raw.items() if k in CONFIG_KEYS}
    return make_config(**raw)
