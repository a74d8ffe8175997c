"""The hwprobe command, capture round trips, the live probe, and code/table agreement."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
import yaml
from pydantic import ValidationError
from support.hwprobe import Machine

import hwprobe
from hwprobe import tables
from hwprobe.capture import capture
from hwprobe.cli import run
from hwprobe.probes import vendor_probes
from runtimes.probe_cli import gpu_uses

HWPROBE = [sys.executable, "-c", "from runtimes.probe_cli import main; main()"]


def test_json_replay_of_a_recorded_machine(machines_dir: Path) -> None:
    root = machines_dir / "hp-zbook-i712850HX+RadeonPROW6600M" / "machine-root"
    done = subprocess.run([*HWPROBE, "--root", str(root), "--json"], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    data = json.loads(done.stdout)
    assert [(g["vendor"], g["vram"], g["gfx"]) for g in data["gpus"]] == [
        ("intel", None, None),
        ("amd", 8573157376, "gfx1032"),
    ]


def test_yaml_and_summary(machines_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(machines_dir / "i7-2600k+arc-a580" / "machine-root")
    assert run(["--root", root, "--yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["gpus"][0]["vram"] == 8096681984
    facts = [
        "CPU:     Intel(R) Core(TM) i7-2600K CPU @ 3.40GHz (amd64, x86-64-v2, 4 cores / 8 threads)",
        "RAM:     10.7 GiB (9.3 GiB available), swap 2.0 GiB",
        "Disk:    15.6 GiB free of 54.2 GiB at /var/lib/snapd/snaps",
        "GPU:     intel Arc A580 [0000:03:00.0] discrete, 7.5 GiB VRAM",
    ]
    # the installed command (runtimes.probe_cli) adds the catalog's runtimes for each GPU
    done = subprocess.run([*HWPROBE, "--root", root], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        *facts[:3],
        facts[3] + "; good for llama.cpp-vulkan, openvino-gpu, onnxruntime-openvino",
    ]
    assert run(["--root", root], gpu_uses=gpu_uses) == 0
    assert capsys.readouterr().out == done.stdout
    # hwprobe alone states facts: it cannot see the catalog one layer up
    assert run(["--root", root]) == 0
    assert capsys.readouterr().out.splitlines() == facts


def test_bad_root_exits_2_with_a_message_and_no_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [*HWPROBE, "--root", str(tmp_path / "missing"), "--json"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"Error: the root '{tmp_path / 'missing'}' is not a directory\n"
        "  --root names a machine recorded by `hwprobe capture DIR`\n"
        "Fix: pass the directory holding the capture's proc/ and sys/\n"
    )


def test_unknown_option_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_capture_refuses_a_non_empty_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "old").write_text("keep me")
    assert run(["capture", str(tmp_path)]) == 2
    assert "is not an empty directory" in capsys.readouterr().err
    assert (tmp_path / "old").read_text() == "keep me"


@pytest.mark.parametrize(
    "name",
    [
        "hp-zbook-i712850HX+RadeonPROW6600M",
        "xps13-7390",
        "intel-core-ultra-7-256v",
        "raspberry-pi-5",
    ],
)
def test_capture_of_a_recorded_machine_replays_to_the_same_profile(
    machines_dir: Path, tmp_path: Path, name: str
) -> None:
    root = str(machines_dir / name / "machine-root")
    capture(tmp_path, root)
    original = hwprobe.probe(root).to_json().replace(root, "<root>")
    replayed = hwprobe.probe(str(tmp_path)).to_json().replace(str(tmp_path), "<root>")
    assert json.loads(replayed) == json.loads(original)


def test_capture_records_nvml_answers_and_driver_links(tmp_path: Path) -> None:
    source = Machine(tmp_path / "src").basics()
    source.pci("0000:01:00.0", 0x030200, 0x10DE, 0x2684, driver="nvidia")
    source.file("run/nvidia-smi/0000:01:00.0/memory.total", "24564\n")
    source.file("run/nvidia-smi/0000:01:00.0/compute_cap", "8.9\n")
    assert run(["capture", str(tmp_path / "out"), "--root", str(source.root)]) == 0
    (gpu,) = hwprobe.probe(str(tmp_path / "out")).gpus
    assert (gpu.vram, gpu.compute_capability) == (24564 * 1024 * 1024, "8.9")
    assert gpu.pci is not None and gpu.pci.driver == "nvidia"


def test_live_probe_here_has_no_gpu_and_no_nvidia_warning() -> None:
    profile = hwprobe.probe()
    assert profile.architecture in ("amd64", "arm64")
    assert profile.cpus and profile.threads and profile.memory.total
    assert profile.gpus == ()
    assert not any(w.source == "nvml" for w in profile.warnings)
    assert profile.runtimes is None


def test_live_runtimes_section_on_request() -> None:
    facts = hwprobe.probe(runtimes=True).runtimes
    assert facts is not None
    assert facts.packages["onnxruntime"] is not None
    assert "CPUExecutionProvider" in facts.onnxruntime_providers
    assert "CPU" in facts.openvino_devices


def test_tables_follow_their_schema_and_reference_known_runtimes() -> None:
    from runtimes.catalog import load_catalog

    pci = tables.pci_table()
    runtime_ids = set(load_catalog().ids)
    for entry in pci.devices:
        assert entry.vendor in pci.vendors, entry
        assert set(entry.runtimes) <= runtime_ids, entry
        if entry.kind == "npu":
            assert entry.driver and entry.llm_capable is not None, entry
            assert entry.runtimes or entry.note, entry
    levels = [lvl.level for lvl in tables.cpu_table().x86_64_levels]
    assert levels == ["x86-64-v1", "x86-64-v2", "x86-64-v3", "x86-64-v4"]
    for name in tables.nvml_table().errors:
        assert isinstance(getattr(pynvml, name), int), name


def test_every_vendor_probe_is_for_a_gpu_vendor_of_the_table() -> None:
    named = set(vendor_probes(None))
    assert named == {"amd", "intel", "nvidia"}
    assert named <= {v.name for v in tables.pci_table().vendors.values() if v.gpu}


@pytest.mark.parametrize("name", ["pci", "cpu", "nvml", "vulkan"])
def test_every_shipped_table_validates_and_loads_as_validated(name: str) -> None:
    data = tables.load_yaml(f"{name}.yaml")
    loaded = getattr(tables, f"{name}_table")()
    assert tables.validate_table(name, data) == loaded


def test_a_malformed_table_entry_is_rejected() -> None:
    data = tables.load_yaml("pci.yaml")
    data["devices"][0]["vendor"] = "10DE"
    message = "pci.yaml devices[0].vendor: '10DE' is not a lowercase hex id like 0x10de"
    with pytest.raises(ValueError, match=re.escape(message)):
        tables.validate_table("pci", data)


@pytest.mark.parametrize(
    ("table", "where"),
    [
        ("pci", "classes"),
        ("pci", "vendors"),
        ("cpu", "arm64_implementers"),
        ("cpu", "arm64_parts"),
        ("cpu", "riscv_vendors"),
    ],
)
def test_a_malformed_table_key_is_rejected(table: str, where: str) -> None:
    data = tables.load_yaml(f"{table}.yaml")
    key = where.replace("_", "-")
    data[key]["0xZZ"] = next(iter(data[key].values()))
    message = f"{table}.yaml {key}: '0xZZ' is not a lowercase hex id like 0x10de"
    with pytest.raises(ValueError, match=re.escape(message)):
        tables.validate_table(table, data)


def test_a_malformed_id_range_is_rejected() -> None:
    data = tables.load_yaml("pci.yaml")
    data["intel-discrete-ranges"][0]["last"] = "0x56A0"
    with pytest.raises(ValueError, match="not a lowercase hex id"):
        tables.validate_table("pci", data)


def test_an_unknown_table_key_is_rejected() -> None:
    data = tables.load_yaml("pci.yaml")
    data["devices"][0]["vram"] = 8
    with pytest.raises(ValidationError) as info:
        tables.validate_table("pci", data)
    assert [(e["loc"], e["type"]) for e in info.value.errors()] == [
        (("devices", 0, "vram"), "unexpected_keyword_argument")
    ]


def test_an_x86_level_without_flags_is_rejected() -> None:
    data = tables.load_yaml("cpu.yaml")
    data["x86-64-levels"][1]["flags"] = []
    message = "cpu.yaml x86-64-levels: x86-64-v2 lists no flags"
    with pytest.raises(ValueError, match=re.escape(message)):
        tables.validate_table("cpu", data)
