"""Fuzzing the parsers that read evidence: anything in, a result or a clear CkptscanError out.

Each test feeds hypothesis-generated input (names, bytes, JSON, TOML, HDF5 attributes) to one
parser and accepts exactly two outcomes: a valid result (checked for the properties that make it
valid) or the documented ``CkptscanError`` subclass, with a one-line message.  Anything else (a
KeyError, an OverflowError from ``int(inf)``, a segfault-prone read) is a bug: in the CLI it would
be an "internal error" exit 4 and the rest of the run would not be analysed.

Example counts are modest (the whole file runs in well under 30 s on 2 cores).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import struct
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptscan.discover.checkpoints import STEP_PATTERNS, parse_step
from ckptscan.errors import CkptscanError, FormatError, LayoutError, ReplayError
from ckptscan.layouts import read_config, resolve_layout
from ckptscan.layouts.userfile import load_layout_file
from ckptscan.limits import JsonError, parse_json
from ckptscan.readers._common import check_shards, load_weight_map
from ckptscan.readers.base import TensorInfo
from ckptscan.readers.safetensors_ import DTYPES, SafetensorsFile, parse_header
from ckptscan.replay.contract import ReplayFile
from tests.runs import TINY, config, state_dict

FAST = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
FILES = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory(prefix="ckptscan-fuzz-") as d:
        yield Path(d)


def one_line(err: CkptscanError) -> None:
    assert "\n" not in err.message and err.message, repr(err.message)


# ------------------------------------------------------------------------------------ bounded JSON


@FAST
@given(
    st.one_of(
        JSON.map(json.dumps),
        st.text(alphabet='[]{}",:0123456789-eE. \\ax', max_size=60),
        st.integers(0, 300).map(lambda n: "[" * n + "]" * n),
        st.integers(1, 400).map(lambda n: "-" + "7" * n),
    )
)
def test_parse_json_is_json_within_limits(text):
    """Anything in: the value ``json.loads`` gives, or a one-line JsonError (depth, integer length,
    invalid JSON); a RecursionError or an int-conversion ValueError never escapes."""
    try:
        value = parse_json(text)
    except JsonError as e:
        assert "\n" not in str(e) and str(e).startswith(("is ", "holds ")), str(e)
        return
    assert json.dumps(value, sort_keys=True) == json.dumps(json.loads(text), sort_keys=True)


# --------------------------------------------------------------------------------------- step names


@FAST
@given(st.text(max_size=40))
def test_parse_step_never_raises(name):
    step = parse_step(name)
    assert step is None or (isinstance(step, int) and step >= 0)
    if step is not None:  # only names that are wholly a known pattern (extension stripped)
        stem = re.sub(r"\.(ckpt|pt|pth|bin|safetensors)$", "", name)
        assert any(p.fullmatch(stem) for p in STEP_PATTERNS)


@FAST
@given(
    st.integers(0, 10**12),
    st.sampled_from(
        [
            "checkpoint-{}",
            "step-{}",
            "step{}",
            "step_{}",
            "iter_{:07d}",
            "global_step{}",
            "epoch=3-step={}.ckpt",
            "{}",
            "{}.pt",
        ]
    ),
    st.sampled_from(["", "-tmp", ".partial", "_old", "x"]),
)
def test_parse_step_known_names_and_unfinished_suffixes(step, fmt, suffix):
    name = fmt.format(step)
    assert parse_step(name) == step
    if suffix:
        assert parse_step(name + suffix) is None


# ------------------------------------------------------------------------------- safetensors headers


@FILES
@given(st.binary(max_size=200))
def test_safetensors_random_bytes(scratch, blob):
    f = scratch / "random.safetensors"
    f.write_bytes(blob)
    try:
        h = parse_header(f)
    except FormatError as e:
        one_line(e)
        assert str(f) in str(e)
    else:  # only an 8-byte length + a JSON object of valid entries gets through
        assert h.data_start + h.data_size == len(blob)


ENTRY = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from([*DTYPES, "C64", "F4", "", 3]),
        "shape": st.one_of(st.lists(st.integers(-1, 5), max_size=3), st.just("x"), st.none()),
        "data_offsets": st.one_of(
            st.lists(st.integers(-2, 80), min_size=2, max_size=2),
            st.lists(st.integers(0, 80), max_size=3),
            st.just([0, True]),
        ),
    }
)


@FILES
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c", "__metadata__"]), ENTRY | JSON, max_size=3),
    st.integers(0, 80),
)
def test_safetensors_random_headers(scratch, header, data_len):
    """Valid-looking headers with random defects: a parsed header is consistent and every tensor
    in it reads back with its shape; everything else is a FormatError."""
    f = scratch / "header.safetensors"
    hb = json.dumps(header).encode()
    f.write_bytes(
        struct.pack("<Q", len(hb)) + hb + bytes(range(256))[:data_len] + b"\0" * max(0, data_len - 256)
    )
    try:
        sf = SafetensorsFile(f)
    except FormatError as e:
        one_line(e)
        return
    spans = []
    for name, e in sf.header.entries.items():
        assert 0 <= e.begin <= e.end <= sf.header.data_size
        assert e.end - e.begin == math.prod(e.shape) * DTYPES[e.code][1]
        if e.end > e.begin:
            spans.append((e.begin, e.end))
        try:
            t = sf.read(name)
        except FormatError as err:  # a dtype this torch lacks
            one_line(err)
        else:
            assert tuple(t.shape) == e.shape
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    sf.close()


# --------------------------------------------------------------------------------- sharded indexes


@FILES
@given(
    st.one_of(
        JSON,
        st.fixed_dictionaries(
            {
                "weight_map": st.dictionaries(
                    st.text(max_size=8),
                    st.one_of(
                        st.sampled_from(
                            [
                                "a.safetensors",
                                "../a.safetensors",
                                "/etc/passwd",
                                "",
                                "sub/../a.safetensors",
                                "C:\\x",
                                "./a.safetensors",
                                "b",
                            ]
                        ),
                        st.text(max_size=10),
                        st.integers(),
                    ),
                    max_size=4,
                )
            }
        ),
    )
)
def test_sharded_index_random_json(scratch, doc):
    folder = scratch / "sharded"
    folder.mkdir(exist_ok=True)
    (folder / "a.safetensors").write_bytes(b"")
    idx = folder / "model.safetensors.index.json"
    idx.write_text(json.dumps(doc))
    try:
        shards = check_shards(folder, load_weight_map(idx), idx)
    except FormatError as e:
        one_line(e)
        assert str(idx) in str(e)
    else:  # only files that really are inside the folder
        for p in shards.values():
            assert p.resolve().parent == folder.resolve() and p.is_file()


@FILES
@given(st.binary(max_size=60))
def test_sharded_index_random_bytes(scratch, blob):
    idx = scratch / "bytes.index.json"
    idx.write_bytes(blob)
    try:
        wm = load_weight_map(idx)
    except FormatError as e:
        one_line(e)
    else:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items())


# ------------------------------------------------------------------------------------ configs/layouts

_SD = state_dict(torch.Generator().manual_seed(0), moe=True)
INFOS = {k: TensorInfo(k, tuple(v.shape), "float32", "model.safetensors") for k, v in _SD.items()}
CONFIG_KEYS = [
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_size",
    "num_hidden_layers",
    "num_local_experts",
    "num_experts_per_tok",
    "rope_theta",
    "model_type",
    "architectures",
    "rope_scaling",
    "partial_rotary_factor",
    "quantization_config",
    "text_config",
    "multi_query",
]
CONFIG_VALUES = st.one_of(
    JSON,
    st.integers(-3, 70),
    st.sampled_from([float("inf"), float("nan"), 1e300, -0.0, "8", "mixtral", ["MixtralForCausalLM"]]),
)


@FAST
@given(st.dictionaries(st.sampled_from(CONFIG_KEYS), CONFIG_VALUES, max_size=6))
def test_config_dialects_never_crash(cfg):
    """Any config.json object: the facts are read (ints positive or None), and the layout either
    resolves consistently with the tensors or is a LayoutError."""
    full = {**config(True), **cfg}
    facts = read_config(full)
    for k in ("hidden_size", "n_layers", "n_heads", "n_kv_heads", "head_dim", "n_experts"):
        v = getattr(facts, k)
        assert v is None or (isinstance(v, int) and v > 0), (k, v)
    try:
        layout = resolve_layout(INFOS, full)
    except LayoutError as e:
        one_line(e)
        return
    for b in layout.attention:
        assert b.n_heads * b.head_dim == TINY["heads"] * TINY["head_dim"] and b.n_heads % b.n_kv_heads == 0


@FAST
@given(
    st.dictionaries(
        st.one_of(st.sampled_from(CONFIG_KEYS), st.text(max_size=12)), JSON, min_size=1, max_size=6
    )
)
def test_config_any_json_object(cfg):
    """Any JSON object as config.json (every draw is one: config.json must hold an object), any value
    under any key: read without an exception, each count a positive int or None."""
    facts = read_config(cfg)
    for k in ("hidden_size", "n_layers", "n_heads", "n_kv_heads", "head_dim", "n_experts", "top_k"):
        v = getattr(facts, k)
        assert v is None or (type(v) is int and v > 0), (k, v)


TOML_LINES = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "[model]",
                "[roles]",
                "[other]",
                "heads = 4",
                "kv_heads = 2",
                "head_dim = 8",
                "heads = 0",
                "heads = -1",
                "heads = true",
                "heads = 4.5",
                "rope_theta = 1e4",
                "family = 'llama'",
                "family = 'nope'",
                "uses_rope = false",
                "bogus = 1",
                "q = 'model\\.layers\\.(\\d+)\\.self_attn\\.q_proj\\.weight'",
                "k = 'model\\.layers\\.(\\d+)\\.self_attn\\.k_proj\\.weight'",
                "qkv = 'x(\\d+)'",
                "qkv_order = 'per_head'",
                "router = '(['",
                "router = 'a(\\d+)(\\d+)'",
                "routing = 'softmax_topk'",
                "routing = 'magic'",
                "q = 3",
                "k = 'model\\.layers\\.(?P<layer>\\d+)\\.self_attn\\.k_proj\\.weight'",
                "transposed = 'yes'",
                "norm_offset = 1",
                "model = 3",
                "'",
            ]
        ),
        st.text(max_size=20),
    ),
    max_size=8,
)


@FILES
@given(TOML_LINES)
def test_layout_files(scratch, lines):
    f = scratch / "layout.toml"
    f.write_text("\n".join(lines), encoding="utf-8")
    try:
        user = load_layout_file(f)
    except LayoutError as e:
        one_line(e)
        assert str(f) in str(e)
        return
    try:
        layout = resolve_layout(INFOS, config(True), f)
    except LayoutError as e:
        one_line(e)
        return
    assert layout.attention or layout.routers
    assert user.path == f


@FILES
@given(st.binary(max_size=120))
def test_layout_file_random_bytes(scratch, blob):
    f = scratch / "bytes.toml"
    f.write_bytes(blob)
    try:
        load_layout_file(f)
    except LayoutError as e:
        one_line(e)


# ------------------------------------------------------------------------------------- replay files

_COUNTER = itertools.count()
ATTR = st.one_of(
    st.none(),
    st.integers(-5, 2**40),
    st.text(st.characters(exclude_characters="\x00"), max_size=10),  # h5py writes no string with a NUL
    st.floats(allow_nan=True),
    st.just("ckptscan-replay/1"),
    st.lists(st.integers(0, 3), min_size=1, max_size=3),
    st.binary(min_size=1, max_size=5),
)


@FILES
@given(
    fmt=st.one_of(st.just("ckptscan-replay/1"), ATTR),
    step=ATTR,
    layer_keys=st.lists(st.sampled_from(["0", "1", "x", "-1", "01"]), max_size=3, unique=True),
    ids_shape=st.one_of(st.none(), st.lists(st.integers(0, 3), min_size=1, max_size=3)),
    ids_float=st.booleans(),
    act_shape=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    act_kind=st.sampled_from(["f4", "f2", "i4", "u2-bf16", "u2"]),
)
def test_replay_attributes_and_datasets(
    scratch, fmt, step, layer_keys, ids_shape, ids_float, act_shape, act_kind
):
    f = scratch / f"replay-{next(_COUNTER)}.h5"  # a fresh name: a leaked handle must not hide the first bug
    with h5py.File(f, "w") as h:
        for key, val in (("format", fmt), ("step", step)):
            if val is not None:
                h.attrs[key] = np.void(val) if isinstance(val, bytes) else val
        for k in layer_keys:
            g = h.create_group(f"layers/{k}")
            dtype = {"f4": np.float32, "f2": np.float16, "i4": np.int32}.get(act_kind, np.uint16)
            ds = g.create_dataset("attn_in", data=np.ones(act_shape, dtype=dtype))
            if act_kind == "u2-bf16":
                ds.attrs["dtype"] = "bfloat16"
        if ids_shape is not None:
            h.create_dataset(
                "input_ids", data=np.zeros(ids_shape, dtype=np.float32 if ids_float else np.int64)
            )
    try:
        with ReplayFile(f) as r:
            r.check(4, n_layers=1)
            x = r.attn_in(0, expected_d=4)
            assert x.dtype == torch.float32 and x.shape[-1] == 4
            r.check_tokens(r.input_ids())
    except ReplayError as e:
        one_line(e)
        assert str(f) in str(e)
