"""Checkpoint readers: round trips against the writers' own libraries, and every broken-input case.

References are the tensors we wrote (compared bit for bit through a uint8 view) and, for DCP, torch's
own ``dcp.load``.  Every input is generated in ``tmp_path``.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import warnings
from pathlib import Path

import pytest
import safetensors.torch as st
import torch

from ckptscan.errors import FormatError, InputError, UnsafePickleError
from ckptscan.readers import detect_format, is_complete, open_checkpoint
from ckptscan.readers.base import TensorSource

# --------------------------------------------------------------------------------------------- helpers

ALL_DTYPES = [
    torch.float64, torch.float32, torch.float16, torch.bfloat16,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
    torch.uint16, torch.uint32, torch.uint64,
    torch.float8_e4m3fn, torch.float8_e5m2,
]  # fmt: skip


def random_bits(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """A tensor of arbitrary bit patterns (NaNs, infs, denormals included): bit-exactness is tested."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    itemsize = torch.empty((), dtype=dtype).element_size()
    n = 1
    for d in shape:
        n *= d
    raw = torch.randint(0, 256, (n * itemsize,), dtype=torch.uint8, generator=gen)
    return raw.view(dtype).reshape(shape)


def raw_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def assert_bit_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype
    assert tuple(got.shape) == tuple(want.shape)
    assert raw_bytes(got) == raw_bytes(want)


def read_all(src: TensorSource) -> dict[str, torch.Tensor]:
    return {name: src.read(name) for name in src.infos()}


def write_raw_safetensors(path: Path, header: dict, data: bytes, pad: int = 0) -> None:
    """Hand-written safetensors file (so broken ones can be made): length, JSON header, data."""
    h = json.dumps(header).encode() + b" " * pad
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


def make_sd(gen: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        "model.embed.weight": torch.randn(8, 4, generator=gen).to(torch.bfloat16),
        "model.layers.0.q.weight": torch.randn(4, 4, generator=gen),
        "model.layers.0.k.weight": torch.randn(2, 4, generator=gen).half(),
        "model.norm.weight": torch.randn(4, generator=gen).double(),
    }


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


# ------------------------------------------------------------------------------------------ safetensors


def test_safetensors_round_trip_all_dtypes(tmp_path, gen):
    sd = {f"t_{str(dt)[6:]}": random_bits((3, 5), dt, gen) for dt in ALL_DTYPES}
    sd["scalar"] = torch.tensor(2.5, dtype=torch.bfloat16)
    sd["empty"] = torch.empty(0, 3)
    st.save_file(sd, tmp_path / "model.safetensors", metadata={"format": "pt"})
    for target in (tmp_path, tmp_path / "model.safetensors"):
        assert detect_format(target) == "safetensors"
        with open_checkpoint(target) as src:
            assert src.format == "safetensors"
            infos = src.infos()
            assert set(infos) == set(sd)  # __metadata__ is not a tensor
            for name, want in sd.items():
                assert infos[name].shape == tuple(want.shape)
                assert infos[name].dtype == str(want.dtype).removeprefix("torch.")
                assert infos[name].file == "model.safetensors"
                assert_bit_equal(src.read(name), want)  # bf16 stays bf16, bits unchanged


def test_safetensors_misaligned_data_is_read_correctly(tmp_path):
    want = torch.tensor([1.5, -2.0, 3.25], dtype=torch.float32)
    header = {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}
    for pad in range(4):  # one of these makes 8 + header length odd
        p = tmp_path / f"m{pad}.safetensors"
        write_raw_safetensors(p, header, raw_bytes(want), pad=pad)
        with open_checkpoint(p) as src:
            assert_bit_equal(src.read("x"), want)


def test_safetensors_read_owns_its_memory_and_never_writes_the_file(tmp_path, gen):
    """Tensors are read into memory they own (never a mapping of the evidence, which a re-save in
    place would turn into SIGBUS), so writing into one cannot reach the file."""
    big = torch.randn(1024, 1024, generator=gen)  # 4 MiB we do not read
    small = torch.randn(16, generator=gen)
    path = tmp_path / "model.safetensors"
    st.save_file({"big": big, "small": small}, path)
    before = path.read_bytes()
    with open_checkpoint(path) as src:
        t = src.read("small")
        assert_bit_equal(t, small)
        maps = Path("/proc/self/maps")
        if maps.exists():
            assert str(path.resolve()) not in maps.read_text()
        t.mul_(0)
        assert_bit_equal(src.read("small"), small)  # a second read is not the first one's memory
    assert path.read_bytes() == before


def test_safetensors_sharded_index(tmp_path, gen):
    sd = make_sd(gen)
    names = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    for shard, keys in shards.items():
        st.save_file({k: sd[k] for k in keys}, tmp_path / shard)
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    assert detect_format(tmp_path) == "safetensors-sharded"
    assert is_complete(tmp_path) == (True, "")
    with open_checkpoint(tmp_path) as src:
        assert src.format == "safetensors-sharded"
        assert {n: i.file for n, i in src.infos().items()} == weight_map
        got = read_all(src)
    assert set(got) == set(sd)
    for k in sd:
        assert_bit_equal(got[k], sd[k])


def _index(tmp_path: Path, weight_map: dict[str, str]) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_index_missing_shard(tmp_path, gen):
    st.save_file({"a": torch.ones(2)}, tmp_path / "s1.safetensors")
    _index(tmp_path, {"a": "s1.safetensors", "b": "s2.safetensors"})
    with pytest.raises(FormatError, match="checkpoint incomplete: shard s2.safetensors missing"):
        open_checkpoint(tmp_path)
    ok, why = is_complete(tmp_path)
    assert not ok and "s2.safetensors missing" in why


@pytest.mark.parametrize("kind", ["parent", "absolute"])
def test_index_shard_outside_folder_refused(tmp_path, kind):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    outside = tmp_path / "x.safetensors"  # exists, so only the path rule can refuse it
    st.save_file({"a": torch.ones(2)}, outside)
    _index(ckpt, {"a": "../x.safetensors" if kind == "parent" else str(outside)})
    with pytest.raises(FormatError, match="refused"):
        open_checkpoint(ckpt)
    assert not is_complete(ckpt)[0]


def test_index_tensor_missing_from_shard(tmp_path):
    st.save_file({"a": torch.ones(2)}, tmp_path / "s1.safetensors")
    _index(tmp_path, {"a": "s1.safetensors", "ghost": "s1.safetensors"})
    with open_checkpoint(tmp_path) as src:
        assert_bit_equal(src.read("a"), torch.ones(2))
        with pytest.raises(FormatError, match="'ghost' is listed in the index but missing") as exc:
            src.read("ghost")
        assert "s1.safetensors" in str(exc.value)
        with pytest.raises(FormatError, match="ghost"):
            src.infos()


def test_index_invalid_json(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        open_checkpoint(tmp_path)


F32_2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x01\x02\x03", "shorter than the 8-byte"),
        (b"", "shorter than the 8-byte"),
        (struct.pack("<Q", 1000) + b'{"a": 1}', "header length 1000 runs past the end"),
        (struct.pack("<Q", 9) + b"{not json" + bytes(8), "not valid JSON"),
    ],
    ids=["truncated", "empty", "header-past-end", "invalid-json"],
)
def test_safetensors_broken_headers(tmp_path, content, message):
    p = tmp_path / "model.safetensors"
    p.write_bytes(content)
    with pytest.raises(FormatError, match=message) as exc:
        open_checkpoint(tmp_path).infos()
    assert str(p) in str(exc.value)
    assert not is_complete(tmp_path)[0]


@pytest.mark.parametrize(
    ("header", "data_len", "message"),
    [
        (
            {"a": F32_2, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
            12,
            "'a' .* and 'b' .* overlap",
        ),
        ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, 8, "'a' .* runs past the end"),
        ({"a": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}}, 8, "'a' has unknown dtype 'Q7'"),
        ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, 8, "'a' spans 8 bytes .* needs 12"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, 8, "invalid data_offsets"),
        ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, 8, "invalid shape"),
    ],
    ids=["overlap", "past-end", "unknown-dtype", "span-mismatch", "reversed-offsets", "negative-shape"],
)
def test_safetensors_broken_entries(tmp_path, header, data_len, message):
    p = tmp_path / "model.safetensors"
    write_raw_safetensors(p, header, bytes(data_len))
    with pytest.raises(FormatError, match=message) as exc:
        open_checkpoint(p).infos()
    assert str(p) in str(exc.value)


def test_truncated_real_safetensors_file(tmp_path, gen):
    p = tmp_path / "model.safetensors"
    st.save_file(make_sd(gen), p)
    assert is_complete(tmp_path) == (True, "")
    p.write_bytes(p.read_bytes()[:-10])
    with pytest.raises(FormatError, match="runs past the end of the data section"):
        open_checkpoint(tmp_path).infos()
    assert not is_complete(tmp_path)[0]


def test_multiple_safetensors_without_index_duplicate_name(tmp_path):
    st.save_file({"a": torch.ones(2)}, tmp_path / "part1.safetensors")
    st.save_file({"b": torch.zeros(3)}, tmp_path / "part2.safetensors")
    with open_checkpoint(tmp_path) as src:
        assert src.format == "safetensors-sharded"
        assert {n: i.file for n, i in src.infos().items()} == {
            "a": "part1.safetensors",
            "b": "part2.safetensors",
        }
    st.save_file({"a": torch.zeros(2)}, tmp_path / "part3.safetensors")
    with pytest.raises(FormatError, match="'a' appears in both"):
        open_checkpoint(tmp_path).infos()


# ---------------------------------------------------------------------------------------------- torch


@pytest.mark.parametrize(
    ("wrap", "prefix"),
    [
        (lambda sd: sd, ""),
        (lambda sd: {"state_dict": sd, "epoch": 3}, ""),
        (lambda sd: {"model": sd, "optimizer": {"state": {}, "param_groups": []}, "iteration": 10}, ""),
        (lambda sd: {"module": sd, "ds_version": "0.14", "global_steps": 7}, ""),
        (  # Lightning: names keep their "model." prefix
            lambda sd: {
                "state_dict": {f"model.{k}": v for k, v in sd.items()},
                "optimizer_states": [{"state": {0: {"exp_avg": torch.zeros(2)}}}],
                "global_step": 5,
                "pytorch-lightning_version": "2.4.0",
            },
            "model.",
        ),
    ],
    ids=["plain", "state_dict", "model", "module", "lightning"],
)
def test_torch_plain_and_nested(tmp_path, gen, wrap, prefix):
    sd = make_sd(gen)
    path = tmp_path / "weights.ckpt"
    torch.save(wrap(sd), path)
    assert detect_format(tmp_path) == "torch"
    with open_checkpoint(path) as src:
        assert src.format == "torch"
        got = read_all(src)
        assert {n: (i.shape, i.dtype) for n, i in src.infos().items()} == {
            prefix + k: (tuple(v.shape), str(v.dtype)[6:]) for k, v in sd.items()
        }
    assert set(got) == {prefix + k for k in sd}
    for k, v in sd.items():
        assert_bit_equal(got[prefix + k], v)


def test_torch_nested_dicts_are_flattened_with_dots(tmp_path):
    a, b = torch.arange(3), torch.ones(2, 2)
    torch.save({"encoder": {"layer": {"0": {"w": a}}}, "head": b, "note": "text"}, tmp_path / "m.pt")
    with open_checkpoint(tmp_path / "m.pt") as src:
        assert sorted(src.infos()) == ["encoder.layer.0.w", "head"]
        assert_bit_equal(src.read("encoder.layer.0.w"), a)


def test_torch_parameters_come_back_as_plain_tensors(tmp_path):
    p = torch.nn.Parameter(torch.randn(3))
    torch.save({"w": p}, tmp_path / "pytorch_model.bin")
    with open_checkpoint(tmp_path) as src:
        t = src.read("w")
    assert type(t) is torch.Tensor
    assert_bit_equal(t, p.detach())


def test_torch_legacy_non_zip_file(tmp_path, gen):
    sd = make_sd(gen)
    torch.save(sd, tmp_path / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    assert (tmp_path / "pytorch_model.bin").read_bytes()[:2] != b"PK"
    with open_checkpoint(tmp_path) as src:
        got = read_all(src)
    for k, v in sd.items():
        assert_bit_equal(got[k], v)


def test_torch_sharded_index(tmp_path, gen):
    sd = make_sd(gen)
    names = sorted(sd)
    torch.save({k: sd[k] for k in names[:3]}, tmp_path / "pytorch_model-00001-of-00002.bin")
    torch.save({k: sd[k] for k in names[3:]}, tmp_path / "pytorch_model-00002-of-00002.bin",
               _use_new_zipfile_serialization=False)  # fmt: skip
    wm = {k: "pytorch_model-00001-of-00002.bin" for k in names[:3]}
    wm.update({k: "pytorch_model-00002-of-00002.bin" for k in names[3:]})
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": wm}))
    assert detect_format(tmp_path) == "torch"
    assert is_complete(tmp_path) == (True, "")
    with open_checkpoint(tmp_path) as src:
        assert {n: i.file for n, i in src.infos().items()} == wm
        got = read_all(src)
    for k, v in sd.items():
        assert_bit_equal(got[k], v)
    (tmp_path / "pytorch_model-00002-of-00002.bin").unlink()
    assert not is_complete(tmp_path)[0]
    with pytest.raises(FormatError, match="shard pytorch_model-00002-of-00002.bin missing"):
        open_checkpoint(tmp_path)


class _Payload:
    """Unpickling this runs ``os.mkdir(marker)``: proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_malicious_pickle_refused_then_trusted(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2), "evil": _Payload(marker)}, path)
    with pytest.raises(UnsafePickleError, match="refusing to unpickle.*--trust-pickle") as exc:
        open_checkpoint(path).infos()
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)
    assert not marker.exists()
    with open_checkpoint(path, trust_pickle=True) as src:  # the user vouched for it: payload runs
        assert_bit_equal(src.read("w"), torch.ones(2))
    assert marker.exists()


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda b: b[: len(b) // 2], "not a loadable torch file"),
        (lambda b: b"", "empty"),
        (lambda b: b"this is not a pickle at all", "not a loadable torch file"),
    ],
    ids=["truncated-zip", "empty", "garbage"],
)
def test_torch_broken_files(tmp_path, gen, mangle, message):
    p = tmp_path / "pytorch_model.bin"
    torch.save(make_sd(gen), p)
    p.write_bytes(mangle(p.read_bytes()))
    with pytest.raises(FormatError, match=message) as exc:
        open_checkpoint(tmp_path).infos()
    assert str(p) in str(exc.value)


def test_truncated_zip_is_incomplete(tmp_path, gen):
    p = tmp_path / "pytorch_model.bin"
    torch.save(make_sd(gen), p)
    assert is_complete(tmp_path) == (True, "")
    p.write_bytes(p.read_bytes()[:-100])
    assert not is_complete(tmp_path)[0]


def _permissions_enforced(tmp_path: Path) -> bool:
    """False for root (or CAP_DAC_OVERRIDE), which can read a mode-000 file anyway."""
    probe = tmp_path / "probe"
    probe.write_bytes(b"x")
    probe.chmod(0)
    try:
        probe.read_bytes()
    except PermissionError:
        return True
    finally:
        probe.chmod(0o644)
    return False


@pytest.mark.parametrize("fname", ["model.safetensors", "pytorch_model.bin"])
def test_permission_denied_is_input_error(tmp_path, fname):
    if not _permissions_enforced(tmp_path):
        pytest.skip("running as root: file permissions are not enforced")
    p = tmp_path / fname
    if fname.endswith(".safetensors"):
        st.save_file({"a": torch.ones(2)}, p)
    else:
        torch.save({"a": torch.ones(2)}, p)
    p.chmod(0)
    try:
        with pytest.raises(InputError, match="Permission denied") as exc:
            open_checkpoint(tmp_path).infos()
        assert not isinstance(exc.value, FormatError)
        assert str(p) in str(exc.value)
    finally:
        p.chmod(0o644)


# ------------------------------------------------------------------------------------------------ DCP


def _dcp_save(state: dict, folder: Path) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(folder), no_dist=True)


def test_dcp_round_trip(tmp_path, gen):
    model = make_sd(gen)
    model["model.layers.0.bias"] = torch.arange(5, dtype=torch.int32)
    model["model.empty"] = torch.empty(0, 3)
    state = {"model": model, "step": torch.tensor(42.0), "extra": {"note": "not a tensor"}}
    ckpt = tmp_path / "step_42"
    _dcp_save(state, ckpt)
    assert detect_format(ckpt) == "dcp"
    assert is_complete(ckpt) == (True, "")
    with open_checkpoint(ckpt) as src:
        assert src.format == "dcp"
        infos = src.infos()
        want = {f"model.{k}": v for k, v in model.items()} | {"step": state["step"]}
        assert set(infos) == set(want)  # the non-tensor entry is not listed
        for name, t in want.items():
            assert infos[name].shape == tuple(t.shape)
            assert infos[name].dtype == str(t.dtype)[6:]
            assert infos[name].file.endswith(".distcp")
            assert_bit_equal(src.read(name), t)


def test_dcp_incomplete(tmp_path, gen):
    ckpt = tmp_path / "ck"
    _dcp_save({"w": torch.randn(64, 64, generator=gen)}, ckpt)
    data = next(ckpt.glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:-50])
    ok, why = is_complete(ckpt)
    assert not ok and "truncated" in why
    with pytest.raises(FormatError, match="run past the end"):
        open_checkpoint(ckpt).read("w")
    (ckpt / ".metadata").unlink()
    assert detect_format(ckpt) == "dcp"
    ok, why = is_complete(ckpt)
    assert not ok and ".metadata missing" in why
    with pytest.raises(FormatError, match=".metadata missing"):
        open_checkpoint(ckpt)


def test_dcp_multi_chunk_tensor_matches_torch_loader(tmp_path, gen):
    """A tensor saved as three chunks (as from 2-D sharding) is reassembled; torch's dcp.load agrees."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    full = torch.randn(6, 4, generator=gen).to(torch.bfloat16)
    layout = [((0, 0), (3, 4)), ((3, 0), (3, 2)), ((3, 2), (3, 2))]
    ckpt = tmp_path / "ck"
    ckpt.mkdir()
    buf, storage, chunks = io.BytesIO(), {}, []
    for (r, c), (h, w) in reversed(layout):  # file order differs from offset order
        start = buf.tell()
        torch.save(full[r : r + h, c : c + w].clone(), buf)
        storage[MetadataIndex("w", (r, c))] = _StorageInfo("__0_0.distcp", start, buf.tell() - start)
        chunks.append(ChunkStorageMetadata(offsets=torch.Size((r, c)), sizes=torch.Size((h, w))))
    (ckpt / "__0_0.distcp").write_bytes(buf.getvalue())
    md = TensorStorageMetadata(TensorProperties(dtype=torch.bfloat16), torch.Size(full.shape), chunks)
    with open(ckpt / ".metadata", "wb") as f:
        pickle.dump(Metadata(state_dict_metadata={"w": md}, storage_data=storage), f)

    reference = {"w": torch.zeros(6, 4, dtype=torch.bfloat16)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(reference, checkpoint_id=str(ckpt), no_dist=True)
    with open_checkpoint(ckpt) as src:
        got = src.read("w")
    assert_bit_equal(reference["w"], full)
    assert_bit_equal(got, full)

    # Drop one chunk from the metadata: the hole must be reported, not filled with garbage.
    md.chunks = [c for c in md.chunks if tuple(c.offsets) != (3, 2)]  # a 3x2 hole
    with open(ckpt / ".metadata", "wb") as f:
        pickle.dump(Metadata(state_dict_metadata={"w": md}, storage_data=storage), f)
    with pytest.raises(FormatError, match="chunks cover 18 of 24"):
        open_checkpoint(ckpt).read("w")


def test_dcp_malicious_metadata_refused(tmp_path):
    ckpt = tmp_path / "ck"
    ckpt.mkdir()
    marker = tmp_path / "pwned"
    (ckpt / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(FormatError, match="refusing DCP metadata.*mkdir"):
        open_checkpoint(ckpt)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------- detection


def _touch_st(p: Path, name: str = "w") -> None:
    st.save_file({name: torch.ones(1)}, p)


def test_detection_priority(tmp_path):
    # safetensors index > safetensors files > DCP > torch index > torch files
    f = tmp_path
    torch.save({"t": torch.ones(1)}, f / "pytorch_model.bin")
    assert detect_format(f) == "torch"
    torch.save({"t": torch.ones(1)}, f / "pytorch_model-00001-of-00001.bin")
    (f / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {"t": "pytorch_model-00001-of-00001.bin"}})
    )
    with open_checkpoint(f) as src:
        assert src.format == "torch" and src.infos()["t"].file == "pytorch_model-00001-of-00001.bin"
    _dcp_save({"d": torch.ones(1)}, f)
    assert detect_format(f) == "dcp"
    _touch_st(f / "model.safetensors", "s")
    assert detect_format(f) == "safetensors"
    _touch_st(f / "model-00001-of-00001.safetensors", "x")
    _index(f, {"x": "model-00001-of-00001.safetensors"})
    assert detect_format(f) == "safetensors-sharded"
    with open_checkpoint(f) as src:
        assert list(src.infos()) == ["x"]


def test_hf_trainer_folder_ignores_training_state(tmp_path):
    _touch_st(tmp_path / "model.safetensors")
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin", "scaler.pt"):
        torch.save({"state": {0: {"exp_avg": torch.zeros(1)}}}, tmp_path / name)
    (tmp_path / "trainer_state.json").write_text("{}")
    with open_checkpoint(tmp_path) as src:
        assert src.format == "safetensors" and list(src.infos()) == ["w"]
    (tmp_path / "model.safetensors").unlink()
    assert detect_format(tmp_path) is None
    with pytest.raises(FormatError, match="no checkpoint files found"):
        open_checkpoint(tmp_path)


def test_deepspeed_folder(tmp_path, gen):
    sd = make_sd(gen)
    torch.save({"module": sd, "ds_version": "0.14"}, tmp_path / "mp_rank_00_model_states.pt")
    torch.save(
        {"optimizer_state_dict": {"x": torch.zeros(3)}},
        tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
    )
    with open_checkpoint(tmp_path) as src:
        assert set(src.infos()) == set(sd)


def test_ambiguous_and_missing(tmp_path):
    assert detect_format(tmp_path) is None
    assert not is_complete(tmp_path)[0]
    torch.save({"a": torch.ones(1)}, tmp_path / "step100.pt")
    assert detect_format(tmp_path) == "torch"
    torch.save({"a": torch.ones(1)}, tmp_path / "step200.pt")
    assert detect_format(tmp_path) is None
    with pytest.raises(FormatError, match="ambiguous.*step100.pt, step200.pt"):
        open_checkpoint(tmp_path)
    assert detect_format(tmp_path / "step200.pt") == "torch"
    with pytest.raises(InputError, match="No such file"):
        open_checkpoint(tmp_path / "nope")
    (tmp_path / "notes.txt").write_text("hi")
    assert detect_format(tmp_path / "notes.txt") is None


def test_is_complete_turns_an_unexpected_failure_into_a_reason(tmp_path, monkeypatch):
    """Discovery's containment boundary: a reader bug while checking completeness skips the entry
    with a one-line reason (it used to raise a TypeError of its own from the boundary)."""
    from ckptscan import readers

    def boom(path):
        raise RuntimeError("simulated reader bug")

    monkeypatch.setattr(readers, "_plan", boom)
    ok, why = is_complete(tmp_path)
    assert not ok and "RuntimeError: simulated reader bug" in why and "\n" not in why
