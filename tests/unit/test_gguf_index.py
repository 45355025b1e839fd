"""GgufIndex reads a GGUF file's scalar metadata and tensor table as `gguf.GGUFReader` does (the
reference here), stepping over metadata arrays: on the default model's file, and on a file written
with gguf's own writer holding every scalar type, nested and string arrays, K-quant, Q8_0 and F32
tensors and a non-default alignment. A file cut short or not a GGUF is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from tt_backend.models.checkpoint import default_gguf_path
from tt_backend.models.gguf_index import GgufIndex


def reference(path: Path) -> tuple[dict[str, Any], list[tuple[str, str, tuple[int, ...], bytes]]]:
    reader = gguf.GGUFReader(path)
    fields: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or field.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        value = field.parts[field.data[0]]
        is_text = field.types[0] == gguf.GGUFValueType.STRING
        fields[key] = bytes(value).decode() if is_text else value[0].item()
    tensors = [(t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), np.asarray(t.data).tobytes())
               for t in reader.tensors]
    return fields, tensors


def ours(path: Path) -> tuple[dict[str, Any], list[tuple[str, str, tuple[int, ...], bytes]]]:
    index = GgufIndex.read(path)
    return dict(index.fields), [(t.name, t.type_name, t.shape, t.data.tobytes()) for t in index.tensors]


def test_the_default_models_file_reads_as_ggufs_reader_reads_it() -> None:
    path = default_gguf_path()
    want_fields, want_tensors = reference(path)
    got_fields, got_tensors = ours(path)
    assert got_fields == want_fields
    assert [t[:3] for t in got_tensors] == [t[:3] for t in want_tensors]
    assert got_tensors == want_tensors
    assert {t[1] for t in got_tensors} == {"F32", "Q4_1", "Q8_0"}


def written(path: Path, alignment: int = 64) -> Path:
    rng = np.random.default_rng(3)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_custom_alignment(alignment)
    writer.add_uint8("t.u8", 7)
    writer.add_int8("t.i8", -7)
    writer.add_uint16("t.u16", 65535)
    writer.add_int16("t.i16", -300)
    writer.add_uint32("t.u32", 4_000_000_000)
    writer.add_int32("t.i32", -5)
    writer.add_float32("t.f32", 0.25)
    writer.add_uint64("t.u64", 2**63)
    writer.add_int64("t.i64", -(2**40))
    writer.add_float64("t.f64", 1e-300)
    writer.add_bool("t.bool", True)
    writer.add_string("t.str", "héllo")
    writer.add_array("t.strs", ["a", "", "ünï", "x" * 300])
    writer.add_array("t.ints", [1, 2, 3])
    writer.add_array("t.nested", [[1, 2], [3]])
    writer.add_string("t.after", "still read")
    writer.add_tensor("blk.0.ffn_down.weight", rng.integers(0, 256, (4, 144), dtype=np.uint8),
                      raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    writer.add_tensor("blk.0.attn_q.weight", rng.integers(0, 256, (3, 2 * 34), dtype=np.uint8),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", rng.standard_normal(5).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_every_value_type_arrays_and_an_alignment_read_as_ggufs_reader_reads_them(tmp_path: Path) -> None:
    path = written(tmp_path / "all.gguf")
    want_fields, want_tensors = reference(path)
    got_fields, got_tensors = ours(path)
    assert got_fields == want_fields
    assert got_fields["t.after"] == "still read" and got_fields["general.alignment"] == 64
    assert "t.strs" not in got_fields and "t.nested" not in got_fields  # arrays are stepped over
    assert got_tensors == want_tensors
    assert [t[1:3] for t in got_tensors] == [("Q4_K", (256, 4)), ("Q8_0", (64, 3)), ("F32", (5,))]


def test_a_file_cut_short_or_not_a_gguf_is_refused(tmp_path: Path) -> None:
    whole = written(tmp_path / "all.gguf").read_bytes()
    last = gguf.GGUFReader(tmp_path / "all.gguf").tensors[-1]
    (tmp_path / "cut.gguf").write_bytes(whole[:last.data_offset + 8])  # 2 of its 5 floats
    with pytest.raises(ValueError, match="tensor output_norm.weight runs past the end of the file"):
        GgufIndex.read(tmp_path / "cut.gguf")
    (tmp_path / "head.gguf").write_bytes(whole[:200])
    with pytest.raises(ValueError, match="the GGUF header ends early"):
        GgufIndex.read(tmp_path / "head.gguf")
    (tmp_path / "not.gguf").write_bytes(b"PK\x03\x04" + whole[4:])
    with pytest.raises(ValueError, match="not a GGUF file"):
        GgufIndex.read(tmp_path / "not.gguf")
