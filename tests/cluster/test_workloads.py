"""Trace importers on small files in each format, and the synthetic generator."""

import csv
import json
from pathlib import Path

import pytest

from gpuplan.cluster.workloads import read_helios, read_openb, read_openb_nodes, read_philly, read_reclaims, synthetic
from gpuplan.errors import GpuplanError

OPENB = Path(__file__).resolve().parents[3] / "shared" / "traces" / "openb-2023" / "openb_pod_list_default.csv"
OPENB_NODES = OPENB.with_name("openb_node_list_gpu_node.csv")
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


def test_openb_rows_become_jobs_with_fractional_gpus_and_qos_tiers(tmp_path):
    f = tmp_path / "pods.csv"
    f.write_text(
        POD_HEADER + "p0,12000,16384,1,1000,,LS,Running,0,100,10\n"
        "p1,6000,12288,1,460,,BE,Running,5,65,5\n"
        "p2,6000,12288,0,0,,BE,Running,6,60,6\n"
        "p3,6000,12288,8,1000,V100M32,Burstable,Succeeded,7,7,7\n"
        "p4,6000,12288,2,1000,,LS,Pending,8,900,\n"  # never scheduled: 892 s of waiting, no run
    )
    jobs, skipped = read_openb(f)
    assert [(j.arrival_s, j.gpus, j.work_s, j.tier) for j in jobs] == [(0, 1.0, 90, 1), (5, 0.46, 60, 0)]
    assert skipped == {
        "no GPU (CPU-only task)": 1,
        "no run time (deleted before it ran)": 1,
        "never scheduled (no run time)": 1,
    }


def test_openb_gpu_spec_names_the_models_a_task_accepts_and_the_node_list_each_nodes_model(tmp_path):
    f = tmp_path / "pods.csv"
    f.write_text(POD_HEADER + "p0,1,1,2,1000,V100M16|V100M32,LS,Running,0,100,10\np1,1,1,1,500,,BE,Running,0,100,10\n")
    jobs, _ = read_openb(f)
    assert jobs[0].gpu_models == {"V100M16", "V100M32"} and jobs[1].gpu_models is None
    n = tmp_path / "nodes.csv"
    n.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,8,G2\nn1,1,1,0,\nn2,1,1,2,T4\n")
    assert read_openb_nodes(n) == ((8, 2), ("G2", "T4"), {"node without GPUs": 1})


def test_reclaim_events_are_read_in_time_order_and_a_bad_row_is_named(tmp_path):
    f = tmp_path / "reclaims.csv"
    f.write_text("time_s,gpus\n3600,16\n60,8\n")
    assert read_reclaims(f) == ((60.0, 8.0), (3600.0, 16.0))
    f.write_text("time_s,gpus\n3600,16\n-5,8\n")
    with pytest.raises(GpuplanError, match="line 3"):
        read_reclaims(f)


def test_a_malformed_row_is_named_by_line(tmp_path):
    f = tmp_path / "pods.csv"
    f.write_text(POD_HEADER + "p0,1,1,one,1000,,LS,Running,0,100,10\n")
    with pytest.raises(GpuplanError) as e:
        read_openb(f)
    assert e.value.field == "trace" and "line 2, column num_gpu" in str(e.value)


@pytest.mark.skipif(not OPENB.exists(), reason="the shared openb trace is not here")
def test_the_real_openb_trace_imports_every_gpu_task():
    jobs, skipped = read_openb(OPENB)
    assert len(jobs) + sum(skipped.values()) == 8152
    with open(OPENB, newline="") as f:  # the GPU pods the trace never scheduled (Pending when it ended)
        pending = sum(r["num_gpu"] != "0" and not r["scheduled_time"].strip() for r in csv.DictReader(f))
    assert pending > 0 and skipped["never scheduled (no run time)"] == pending
    assert any(j.gpus < 1 for j in jobs) and {j.tier for j in jobs} == {0, 1}
    gpus, models, _ = read_openb_nodes(OPENB_NODES)
    assert sum(gpus) == 6212 and len(models) == len(gpus) and {"T4", "P100", "G2"} <= set(models)


def test_philly_json_log(tmp_path):
    log = [
        {
            "jobid": "a",
            "submitted_time": "2017-10-03 10:00:00",
            "status": "Pass",
            "attempts": [
                {
                    "start_time": "2017-10-03 10:05:00",
                    "end_time": "2017-10-03 10:10:00",
                    "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}],
                },
                {
                    "start_time": "2017-10-03 11:00:00",
                    "end_time": "2017-10-03 12:00:00",
                    "detail": [{"ip": "m2", "gpus": ["gpu0", "gpu1", "gpu2", "gpu3"]}],
                },
            ],
        },
        {"jobid": "b", "submitted_time": "2017-10-03 10:30:00", "status": "Killed", "attempts": []},
        {
            "jobid": "c",
            "submitted_time": "2017-10-03 09:00:00",
            "status": "Running",
            "attempts": [
                {"start_time": "2017-10-03 09:01:00", "end_time": None, "detail": [{"ip": "m3", "gpus": ["gpu0"]}]}
            ],
        },
    ]
    f = tmp_path / "cluster_job_log"
    f.write_text(json.dumps(log))
    jobs, skipped = read_philly(f)
    assert [(j.arrival_s, j.gpus, j.work_s) for j in jobs] == [(0.0, 4.0, 3600.0)]  # the last attempt's run
    assert skipped == {"never started": 1, "still running at the end of the trace": 1}


def _philly_job(jobid, start, end, gpus):
    return {
        "jobid": jobid,
        "submitted_time": "2017-10-03 10:00:00",
        "attempts": [{"start_time": start, "end_time": end, "detail": [{"ip": "m1", "gpus": gpus}]}],
    }


def test_philly_leaves_out_an_attempt_that_ends_before_it_starts(tmp_path):
    log = [
        _philly_job("a", "2017-10-03 10:05:00", "2017-10-03 10:10:00", ["gpu0"]),
        _philly_job("b", "2017-10-03 10:05:00", "2017-10-03 10:01:00", ["gpu0"]),
    ]
    f = tmp_path / "cluster_job_log"
    f.write_text(json.dumps(log))
    jobs, skipped = read_philly(f)
    assert [(j.gpus, j.work_s) for j in jobs] == [(1.0, 300.0)]
    assert skipped == {"no run time": 1}


def test_philly_gpus_that_are_not_a_list_name_the_job(tmp_path):
    # a string's length is not a GPU count: "gpu0" once read as 4 GPUs
    f = tmp_path / "cluster_job_log"
    f.write_text(json.dumps([_philly_job("a", "2017-10-03 10:05:00", "2017-10-03 10:10:00", "gpu0")]))
    with pytest.raises(GpuplanError, match=r"job 0 \(a\): cannot read it"):
        read_philly(f)


def test_helios_csv(tmp_path):
    f = tmp_path / "cluster_log.csv"
    f.write_text(
        "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        "1,u1,vc1,train,8,64,1,COMPLETED,1000,1010,4610,3600,10\n"
        "2,u2,vc1,prep,0,4,1,COMPLETED,1005,1005,1105,100,0\n"
        "3,u1,vc2,eval,1,8,1,FAILED,1200,1300,1300,0,100\n"
    )
    jobs, skipped = read_helios(f)
    assert [(j.arrival_s, j.gpus, j.work_s) for j in jobs] == [(0.0, 8.0, 3600.0)]
    assert skipped == {"no GPU (CPU job)": 1, "no run time": 1}


def test_synthetic_jobs_offer_the_asked_load_and_repeat_with_the_seed():
    a, b = synthetic(5000, 512, load=0.7, seed=4), synthetic(5000, 512, load=0.7, seed=4)
    assert [(j.arrival_s, j.gpus) for j in a] == [(j.arrival_s, j.gpus) for j in b]
    offered = sum(j.gpus * j.work_s for j in a) / (a[-1].arrival_s * 512)
    assert offered == pytest.approx(0.7, rel=0.1)
    assert all(not j.spot or j.tier == 0 for j in a)
