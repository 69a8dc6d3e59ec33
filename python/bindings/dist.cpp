// Python bindings of the distributed runtime: MPI start-up, process groups, abort, statistics.
//
// MpiRuntime initialises MPI (once per process, before anything else that may fail, so that a
// failure on one rank can still end every rank through abort()). ProcessGroups is built from the
// config's parallel section over the runtime's world (collective), or over a world of one.
// Engine keeps its ProcessGroups alive, and ProcessGroups keeps the runtime alive, so MPI is
// finalised only after the last communicator is gone.
#include <mpi.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>

#include "bindings.h"
#include "myriad/config/run_config.h"
#include "myriad/core/error.h"
#include "myriad/distributed/mpi_runtime.h"
#include "myriad/parallel/pipeline_schedule.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/train/config_wiring.h"

namespace py = pybind11;

namespace myriad::python {

namespace {

py::dict stats_dict(const distributed::ProcessGroups& groups) {
  py::dict out;
  for (const auto& [name, stats] : groups.stats()) {
    py::dict ops;
    for (int i = 0; i < distributed::kCommOpCount; ++i) {
      const distributed::CommOpStats& s = stats.ops[static_cast<std::size_t>(i)];
      if (s.calls == 0) continue;
      py::dict d;
      d["calls"] = s.calls;
      d["bytes_sent"] = s.bytes_sent;
      d["bytes_received"] = s.bytes_received;
      d["seconds"] = s.seconds;
      d["wait_seconds"] = s.wait_seconds;
      ops[py::str(distributed::comm_op_name(static_cast<distributed::CommOp>(i)))] = d;
    }
    out[py::str(name)] = ops;
  }
  return out;
}

}  // namespace

void bind_dist(py::module_& m) {
  m.def(
      "pipeline_schedule",
      [](const std::string& kind, int stages, int micro_batches, int virtual_stages) {
        py::list ranks;
        for (const auto& actions : parallel::build_schedule(require_choice<PipelineSchedule>(kind, "pipeline schedule"),
                                                            stages, micro_batches, virtual_stages)) {
          py::list steps;
          for (const parallel::PipelineAction& a : actions) {
            steps.append(py::make_tuple(parallel::action_name(a.type), a.micro_batch, a.chunk, a.peer));
          }
          ranks.append(steps);
        }
        return ranks;
      },
      py::arg("kind"), py::arg("stages"), py::arg("micro_batches"), py::arg("virtual_stages") = 1,
      "the engine's pipeline schedule: per rank, its actions as (type, micro_batch, chunk, peer)");
  m.def(
      "simulate_pipeline",
      [](const std::string& kind, int stages, int micro_batches, int virtual_stages, double backward_cost) {
        const PipelineSchedule k = require_choice<PipelineSchedule>(kind, "pipeline schedule");
        const parallel::ScheduleCheck check =
            parallel::simulate_schedule(parallel::build_schedule(k, stages, micro_batches, virtual_stages), stages,
                                        micro_batches, virtual_stages, backward_cost);
        py::dict d;
        d["ok"] = check.ok;
        d["problem"] = check.problem;
        d["idle_fraction"] = check.idle_fraction;
        d["makespan"] = check.makespan;
        d["peak_in_flight"] = check.peak_in_flight;
        d["bubble_formula"] = parallel::bubble_formula(k, stages, micro_batches, virtual_stages);
        return d;
      },
      py::arg("kind"), py::arg("stages"), py::arg("micro_batches"), py::arg("virtual_stages") = 1,
      py::arg("backward_cost") = 2.0,
      "runs the schedule under its time model (forward 1, backward backward_cost, no transfer time): idle "
      "fraction, makespan in forward times, peak chunk forwards in flight per rank, and the closed-form bubble");
  py::class_<distributed::MpiRuntime>(m, "MpiRuntime", "MPI for this process (initialised on construction)")
      .def(py::init<>())
      .def_property_readonly("rank", &distributed::MpiRuntime::world_rank)
      .def_property_readonly("size", &distributed::MpiRuntime::world_size)
      .def_static("launched_by_mpi", &distributed::MpiRuntime::launched_by_mpi)
      .def_static(
          "abort",
          [](int code, const std::string& reason) {
            int rank = 0;
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            std::fprintf(stderr, "[rank %d] fatal: %s\n", rank, reason.c_str());
            std::fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, code);
          },
          py::arg("exit_code"), py::arg("reason"), "print the reason and end every rank of the job");

  py::class_<distributed::RankGrid>(m, "RankGrid",
                                    "The layout's rank grid: tp fastest, then cp, dp, pp; ep = dp % ep "
                                    "(distributed/rank_grid.h)")
      .def(py::init([](int tp, int cp, int dp, int pp, int ep) {
             const distributed::GridShape shape{.tp = tp, .cp = cp, .ep = ep, .dp = dp, .pp = pp};
             return distributed::RankGrid(shape, shape.product());
           }),
           py::arg("tp") = 1, py::arg("cp") = 1, py::arg("dp") = 1, py::arg("pp") = 1, py::arg("ep") = 1)
      .def_property_readonly("world_size", &distributed::RankGrid::world_size)
      .def(
          "coords",
          [](const distributed::RankGrid& grid, int rank) {
            const distributed::GridCoord c = grid.coords(rank);
            py::dict d;
            for (distributed::Axis axis : distributed::kAxes) d[distributed::axis_name(axis)] = c[axis];
            return d;
          },
          py::arg("rank"), "the rank's coordinate on every axis: {'tp', 'cp', 'ep', 'dp', 'pp'}")
      .def(
          "rank_of",
          [](const distributed::RankGrid& grid, int tp, int cp, int dp, int pp) {
            distributed::GridCoord c;
            c[distributed::Axis::tp] = tp;
            c[distributed::Axis::cp] = cp;
            c[distributed::Axis::dp] = dp;
            c[distributed::Axis::pp] = pp;
            c[distributed::Axis::ep] = dp % grid.shape().ep;
            return grid.rank_of(c);
          },
          py::arg("tp") = 0, py::arg("cp") = 0, py::arg("dp") = 0, py::arg("pp") = 0,
          "the rank at a coordinate (ep follows from dp)")
      .def("describe", &distributed::RankGrid::describe, py::arg("rank"));

  py::class_<distributed::ProcessGroups>(m, "ProcessGroups",
                                         "Communicators of every parallel axis (see docs/parallelism.md)")
      .def(py::init([](const RunConfig& config, distributed::MpiRuntime* runtime) {
             if (runtime == nullptr)
               return std::make_unique<distributed::ProcessGroups>(distributed::ProcessGroups::single());
             return std::make_unique<distributed::ProcessGroups>(
                 train::grid_shape(config.parallel, runtime->world_size()), runtime->world(),
                 train::reduction_options(config.parallel));
           }),
           py::arg("config"), py::arg("runtime") = nullptr, py::keep_alive<1, 3>(),
           "collective over the world when a runtime is given; a world of one otherwise")
      .def_property_readonly("rank", &distributed::ProcessGroups::rank)
      .def_property_readonly("world_size", [](const distributed::ProcessGroups& g) { return g.grid().world_size(); })
      .def("describe", [](const distributed::ProcessGroups& g) { return g.grid().describe(g.rank()); })
      .def_property_readonly("reduction", &distributed::ProcessGroups::reduction,
                             "the algorithm of the gradient reductions (parallel.dp_reduce settled)")
      .def("stats", &stats_dict, "per group and op: calls, bytes_sent, bytes_received, seconds, wait_seconds")
      .def(
          "any",
          [](distributed::ProcessGroups& g, bool flag) {
            py::gil_scoped_release release;
            Tensor t = Tensor::full({1}, flag ? 1.0 : 0.0, DType::i32);
            g.world().all_reduce(t, distributed::ReduceOp::max);
            return t.data<std::int32_t>()[0] != 0;
          },
          py::arg("flag"), "collective: true when the flag is set on any rank")
      .def("barrier", [](distributed::ProcessGroups& g) {
        py::gil_scoped_release release;
        g.world().barrier();
      });
}

}  // namespace myriad::python
