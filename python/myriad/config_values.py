"""Config values for tools: a section's values in use, read through the generic binding.

`myriad.Config` reads every key as `cfg["section.key"]` (stored values; None for auto), and
`cfg.resolved()` fills in the derived keys; `cfg.derived()` gives the values in use that no key
holds (padded vocabulary, head width, the blocks' family, MoE values in use), computed by the
C++ config. `model_in_use(cfg)` joins the two for the model section, so the planner and the
exporters read the engine's arithmetic and never repeat a default or a derivation.
"""


def section_in_use(config, section):
    """{key: value} of `section` in `config.resolved()`, plus the derived values named under it
    (keys without the 'section.' prefix; nested keys such as 'attention.kind' stay dotted)."""
    values = dict(config.resolved().to_dict()[section])
    prefix = section + "."
    values.update({key[len(prefix):]: value for key, value in config.derived().items() if key.startswith(prefix)})
    return values


def model_in_use(config):
    """The model section's values in use: every model key resolved plus family, padded_vocab_size,
    head_dim, moe_top_k, expert_ffn and moe_capacity_factor (config/derived_values.h)."""
    return section_in_use(config, "model")
