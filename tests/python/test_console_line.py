"""The console line of a step: the cluster-training recipe's monitoring fields in its order —
`Iteration | Loss | GPU Util | Comm | Memory BW | Pcie BW | Samples/sec | Grad Norm` — with the
three GPU fields when the step's metrics carry the GPU's readings (training.device cuda with NVML),
left out on the CPU, and `n/a` for a field the device did not report."""
from myriad.train import Window, step_line

STEP = {"step": 7, "loss": 3.25, "grad_norm": 0.5, "lr": 1e-3, "tokens": 4096, "samples": 4,
        "step_seconds": 0.5, "comm_seconds": 0.05, "bubble_seconds": 0.0, "model_flops": 4e12,
        "memory": {"parameters": 2**30, "gradients": 0, "optimizer": 0, "activations": 0, "workspace": 0}}


def line(m, device):
    window = Window()
    window.add(m)
    return step_line(m, 100, window, 1, 1e13, device)


def test_gpu_fields_follow_the_recipes_order_on_cuda():
    m = dict(STEP, gpu={"utilization": 0.93, "memory_bw": 0.71, "pcie_bw": None, "power_watts": 650.0,
                        "sm_clock_mhz": 1980.0, "readings": 5})
    fields = [part.split(":")[0] for part in line(m, "cuda").split(" | ")]
    assert fields[:8] == ["Iteration", "Loss", "GPU Util", "Comm", "Memory BW", "Pcie BW", "Samples/sec", "Grad Norm"]
    text = line(m, "cuda")
    assert "GPU Util: 93%" in text and "Memory BW: 71%" in text and "Pcie BW: n/a" in text
    assert "MFU: 80.0%" in text  # 4e12 FLOPs in 0.5 s over a 1e13 FLOP/s peak


def test_the_cpu_line_has_no_gpu_fields():
    text = line(STEP, "cpu")
    assert "GPU Util" not in text and "Memory BW" not in text and "Pcie BW" not in text
    assert [part.split(":")[0] for part in text.split(" | ")][:5] == [
        "Iteration", "Loss", "Comm", "Samples/sec", "Grad Norm"]
