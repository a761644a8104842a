"""Checkpoint format: round trip, atomic write, corrupt/truncated files, incompatible configs."""
import json
import os

import numpy as np
import pytest

from models.checkpoint import (TEMP_RE, CheckpointFileError, atomic_write, check_compatible,
                               estimate_size, fill_tree, link_copy, load_checkpoint,
                               remove_orphans, save_checkpoint, tree_arrays)
from models.rundir import RUN_FILES


def _write(path):
    arrays = {"params/w": np.arange(6.0).reshape(2, 3), "state/pos": np.asarray(5)}
    save_checkpoint(path, arrays, {"step": 7, "model": {"d_model": 3}})
    return arrays


def test_round_trip(tmp_path):
    path = tmp_path / "c.npz"
    arrays = _write(path)
    got, header = load_checkpoint(path)
    assert header["step"] == 7 and header["version"] == 1 and len(header["checksum"]) == 64
    np.testing.assert_array_equal(got["params/w"], arrays["params/w"])
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]   # no temporary file left


def test_pytree_paths_round_trip(tmp_path):
    tree = {"a": np.ones((2, 2), np.float32), "b": [np.zeros(3)], "pos": 4}
    path = tmp_path / "t.npz"
    save_checkpoint(path, tree_arrays(tree, "params", "p"), {})
    arrays, _ = load_checkpoint(path)
    back = fill_tree(tree, arrays, "params", "p", str(path))
    assert back["a"].dtype == np.float32 and back["pos"] == 4 and isinstance(back["pos"], int)
    with pytest.raises(CheckpointFileError, match="shape"):
        fill_tree({"a": np.ones(3), "b": [np.zeros(3)], "pos": 1}, arrays, "params", "p", "x")
    with pytest.raises(CheckpointFileError, match="no entry"):
        fill_tree({"c": np.ones(3)}, arrays, "params", "p", "x")


def test_truncated_file_is_a_clear_error(tmp_path):
    path = tmp_path / "c.npz"
    _write(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointFileError, match=r"c\.npz is truncated or corrupt"):
        load_checkpoint(path)


def test_flipped_byte_is_caught_by_the_checksum(tmp_path):
    path = tmp_path / "c.npz"
    save_checkpoint(path, {"params/w": np.zeros(1000)}, {"step": 1})
    data = bytearray(path.read_bytes())
    i = data.find(b"\x00" * 64) + 32   # inside the zero array's bytes (stored uncompressed)
    data[i] = 1
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointFileError, match="c.npz"):
        load_checkpoint(path)


def test_not_a_checkpoint(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, a=np.ones(2))
    with pytest.raises(CheckpointFileError, match="not a Hecate checkpoint"):
        load_checkpoint(path)
    with pytest.raises(CheckpointFileError, match="not found"):
        load_checkpoint(tmp_path / "missing.npz")


def test_failed_write_keeps_the_old_checkpoint(tmp_path):
    path = tmp_path / "c.npz"
    _write(path)
    before = path.read_bytes()

    class Boom:   # np.savez fails half way through writing the archive
        shape = (1,)

        def __array__(self, *a, **k):
            raise RuntimeError("disk full")
    with pytest.raises(RuntimeError):
        save_checkpoint(path, {"params/a": np.ones(1), "params/z": Boom()}, {})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c.npz"]


def test_incompatible_config_names_the_fields(tmp_path):
    header = {"model": {"d_model": 64, "rule": "delta", "layers": 2}}
    check_compatible("c.npz", header, {"d_model": 64, "rule": "delta", "layers": 2})
    with pytest.raises(CheckpointFileError) as e:
        check_compatible("c.npz", header, {"d_model": 32, "rule": "titans", "layers": 2})
    msg = str(e.value)
    assert "d_model: 64 (checkpoint) vs 32 (this run)" in msg and "rule" in msg
    assert "layers" not in msg
    assert json.dumps(header)   # headers stay JSON


def test_interrupted_write_removes_its_temporary_file(tmp_path):
    path = tmp_path / "last.npz"
    path.write_bytes(b"old")
    seen = []

    def write(f):
        f.write(b"half")
        seen.extend(p.name for p in tmp_path.iterdir() if TEMP_RE.match(p.name))
        raise KeyboardInterrupt   # a second Ctrl-C mid-write
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, write)
    assert len(seen) == 1 and seen[0].startswith("last.npz.")
    assert os.listdir(tmp_path) == ["last.npz"] and path.read_bytes() == b"old"


def test_orphan_cleanup_touches_only_the_writers_own_temporary_files(tmp_path):
    ours = ["last.npz.a1b2c3d4.tmp", "step_000200.npz.00012345.tmp", "config.json.zz_9y8x7.tmp"]
    others = ["notes.tmp", "last.npz.tmp", "data.txt.a1b2c3d4.tmp", "last.npz.A1B2C3D4.tmp",
              "last.npz", "x.a1b2c3d4.tmp.bak"]
    for name in ours + others:
        (tmp_path / name).write_text("x")
    assert sorted(remove_orphans(tmp_path, RUN_FILES)) == sorted(ours)
    assert sorted(os.listdir(tmp_path)) == sorted(others)


def test_link_copy_keeps_the_snapshot_when_the_source_is_replaced(tmp_path):
    save_checkpoint(tmp_path / "last.npz", {"params/w": np.ones(3)}, {"step": 1})
    link_copy(tmp_path / "last.npz", tmp_path / "step_1.npz")
    save_checkpoint(tmp_path / "last.npz", {"params/w": np.zeros(3)}, {"step": 2})
    assert load_checkpoint(tmp_path / "step_1.npz")[1]["step"] == 1
    assert load_checkpoint(tmp_path / "last.npz")[1]["step"] == 2
    assert sorted(os.listdir(tmp_path)) == ["last.npz", "step_1.npz"]


def test_size_estimate_covers_the_file(tmp_path):
    arrays = {f"params/w{i}": np.ones((i + 1, 7), np.float32) for i in range(20)}
    header = {"step": 3, "model": {"d_model": 8}}
    save_checkpoint(tmp_path / "c.npz", arrays, header)
    size = (tmp_path / "c.npz").stat().st_size
    assert size <= estimate_size(arrays, header) <= size + 64 * 1024
