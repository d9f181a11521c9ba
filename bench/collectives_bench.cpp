// nccl-tests-style bandwidth tables for all-reduce, all-gather and reduce-scatter (trident comm).
//
// usage: mpirun -np N trident_collectives_bench [--backend mpi] [--min-bytes 8] [--max-bytes 64M]
//          [--factor 2] [--warmup 5] [--iters 20] [--max-seconds 1]
//          [--ops allreduce,allgather,reducescatter]
//
// Definitions (nccl-tests, doc/PERFORMANCE.md), with n ranks and t the time of one operation:
//   size S    all-reduce:     the buffer every rank reduces in place, count * 4 bytes;
//             all-gather:     the total gathered buffer, n * send_count * 4 bytes;
//             reduce-scatter: the total buffer every rank sends, n * recv_count * 4 bytes.
//             `count` is the per-rank count the call takes (count, send_count, recv_count), as in
//             nccl-tests' (elements) column. A size below 4 n bytes gives no element per rank for
//             all-gather and reduce-scatter; those rows are skipped.
//   time t    each rank times `iters` back-to-back calls after a barrier and divides by iters;
//             t is the mean of that over ranks (nccl-tests' default, -a 1).
//   algbw     S / t (GB/s, 1 GB = 1e9 bytes).
//   busbw     algbw * 2(n-1)/n for all-reduce; algbw * (n-1)/n for all-gather and reduce-scatter:
//             what each rank's link must carry, comparable to the hardware's peak bandwidth
//             whatever n is.
// #wrong counts elements, over all ranks, that differ from the exact expected result of one call
// on rank-valued data (small integers, so float sums are exact in any summation order).
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "core/runtime.hpp"
#include "core/types.hpp"

namespace {

using namespace trident;

struct Options {
  std::string backend = "mpi";
  size_t min_bytes = 8, max_bytes = size_t{64} << 20;
  double factor = 2;
  int warmup = 5, iters = 20;
  // Per size, timed iterations are cut so that they take about this long (at least 3 remain):
  // keeps the 64 MiB rows of an oversubscribed CPU run from dominating the runtime.
  double max_seconds = 1.0;
  std::vector<std::string> ops = {"allreduce", "allgather", "reducescatter"};
};

void usage() {
  std::fprintf(stderr,
               "usage: trident_collectives_bench [--backend mpi] [--min-bytes B] [--max-bytes B] "
               "[--factor F] [--warmup N] [--iters N] [--max-seconds S] "
               "[--ops allreduce,allgather,reducescatter]\n"
               "  sizes take K, M, G suffixes (powers of 1024), e.g. --max-bytes 64M\n");
}

bool parse_bytes(const std::string& s, size_t& out) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) return false;
  double scale = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") {
    scale = 1024.0;
  } else if (suffix == "M" || suffix == "m") {
    scale = 1024.0 * 1024;
  } else if (suffix == "G" || suffix == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (!suffix.empty()) {
    return false;
  }
  out = static_cast<size_t>(v * scale);
  return true;
}

// Returns "" on success, else what was wrong.
std::string parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return "help";
    if (i + 1 >= argc) return "option " + a + " needs a value";
    const std::string v = argv[++i];
    bool ok = true;
    if (a == "--backend") {
      o.backend = v;
    } else if (a == "--min-bytes") {
      ok = parse_bytes(v, o.min_bytes);
    } else if (a == "--max-bytes") {
      ok = parse_bytes(v, o.max_bytes);
    } else if (a == "--factor") {
      o.factor = std::atof(v.c_str());
      ok = o.factor > 1;
    } else if (a == "--warmup") {
      o.warmup = std::atoi(v.c_str());
      ok = o.warmup >= 0;
    } else if (a == "--iters") {
      o.iters = std::atoi(v.c_str());
      ok = o.iters >= 1;
    } else if (a == "--max-seconds") {
      o.max_seconds = std::atof(v.c_str());
      ok = o.max_seconds > 0;
    } else if (a == "--ops") {
      o.ops.clear();
      std::stringstream list(v);
      for (std::string op; std::getline(list, op, ',');) {
        if (op != "allreduce" && op != "allgather" && op != "reducescatter")
          return "unknown collective '" + op + "' (valid: allreduce, allgather, reducescatter)";
        o.ops.push_back(op);
      }
      ok = !o.ops.empty();
    } else {
      return "unknown option " + a;
    }
    if (!ok) return "bad value '" + v + "' for " + a;
  }
  if (o.min_bytes < 1 || o.max_bytes < o.min_bytes) return "need 1 <= --min-bytes <= --max-bytes";
  return "";
}

// The backend named on the command line, or nullptr with the reason in `why`. NCCL would slot in
// here: every buffer below is a View in the default execution space's memory, so it is already a
// device buffer on a CUDA build (where the MPI backend in turn needs a CUDA-aware MPI).
std::unique_ptr<Communicator> make_backend(const std::string& name, MPI_Comm comm,
                                           std::string& why) {
  if (name == "mpi") return std::make_unique<MpiCommunicator>(comm);
  if (name == "nccl") {
#ifdef TRIDENT_HAVE_NCCL
    why =
        "--backend nccl: this build has NCCL, but trident_collectives_bench does not drive it "
        "yet (only mpi; see make_backend in bench/collectives_bench.cpp)";
#else
    why = "--backend nccl: this build has no NCCL (only mpi is available)";
#endif
    return nullptr;
  }
  why = "unknown --backend '" + name + "' (valid: mpi)";
  return nullptr;
}

enum class Op { kAllReduce, kAllGather, kReduceScatter };

struct OpInfo {
  Op op;
  const char* name;
  const char* mode;
  const char* redop;
};

OpInfo op_info(const std::string& flag) {
  if (flag == "allreduce") return {Op::kAllReduce, "all-reduce", "in place", "sum"};
  if (flag == "allgather") return {Op::kAllGather, "all-gather", "out of place", "none"};
  return {Op::kReduceScatter, "reduce-scatter", "out of place", "sum"};
}

// The count the call takes for a total size of `bytes` (0 when no element per rank is left).
size_t count_for(Op op, size_t bytes, int n) {
  return op == Op::kAllReduce ? bytes / sizeof(float) : bytes / sizeof(float) / n;
}

// S as nccl-tests defines it, from the call's count.
size_t bytes_for(Op op, size_t count, int n) {
  return op == Op::kAllReduce ? count * sizeof(float) : count * n * sizeof(float);
}

double bus_factor(Op op, int n) {
  return op == Op::kAllReduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

// Small exact integers: (rank + 1) * (i % 251 + 1), so a sum over ranks is exactly
// n (n + 1) / 2 * (i % 251 + 1) in any order.
KOKKOS_INLINE_FUNCTION float pattern(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 251 + 1));
}

// send: what this rank contributes; recv: where the result lands (in place for all-reduce, so
// `send` stays empty there).
struct Buffers {
  View1 send, recv;
};

Buffers make_buffers(Op op, size_t count, int n, int rank) {
  Buffers b;
  switch (op) {
    case Op::kAllReduce:
      b.recv = View1("bench_allreduce", count);
      break;
    case Op::kAllGather:
      b.send = View1("bench_allgather_send", count);
      b.recv = View1("bench_allgather_recv", count * n);
      break;
    case Op::kReduceScatter:
      b.send = View1("bench_reducescatter_send", count * n);
      b.recv = View1("bench_reducescatter_recv", count);
      break;
  }
  const View1 in = op == Op::kAllReduce ? b.recv : b.send;
  Kokkos::parallel_for(
      "bench_fill", Kokkos::RangePolicy<Exec>(0, in.extent(0)),
      KOKKOS_LAMBDA(const size_t i) { in(i) = pattern(rank, i); });
  return b;
}

void run_once(Communicator& comm, Op op, Buffers& b, size_t count) {
  switch (op) {
    case Op::kAllReduce:
      comm.allreduce_sum(window(b.recv, 0, count));
      break;
    case Op::kAllGather:
      comm.allgather(b.send, b.recv);
      break;
    case Op::kReduceScatter:
      comm.reduce_scatter_sum(b.send, b.recv);
      break;
  }
}

// Elements of this rank's result that differ from the exact expected value after one call.
int64_t count_wrong(Op op, const Buffers& b, size_t count, int n, int rank) {
  const View1 out = b.recv;
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  // Reduce-scatter's chunk of rank r starts at element r * count of the summed buffer.
  const size_t offset = op == Op::kReduceScatter ? static_cast<size_t>(rank) * count : 0;
  const bool gather = op == Op::kAllGather;
  int64_t wrong = 0;
  Kokkos::parallel_reduce(
      "bench_check", Kokkos::RangePolicy<Exec>(0, out.extent(0)),
      KOKKOS_LAMBDA(const size_t i, int64_t& acc) {
        const float want = gather ? pattern(static_cast<int>(i / count), i % count)
                                  : ranks_sum * pattern(0, offset + i);
        acc += out(i) != want ? 1 : 0;
      },
      wrong);
  return wrong;
}

std::vector<size_t> sizes(const Options& o) {
  std::vector<size_t> out;
  for (double s = static_cast<double>(o.min_bytes); s <= static_cast<double>(o.max_bytes) * 1.0001;
       s *= o.factor)
    out.push_back(static_cast<size_t>(s));
  return out;
}

double mean_over_ranks(double x, int n) {
  double sum = 0;
  MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / n;
}

double max_over_ranks(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

// Times `iters` calls on every rank; returns mean over ranks of the seconds per call.
double time_calls(const std::function<void()>& call, int iters, int n) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) call();
  Kokkos::fence();  // an asynchronous (device) backend must have finished
  return mean_over_ranks((MPI_Wtime() - t0) / iters, n);
}

}  // namespace

int main(int argc, char** argv) {
  return trident::with_mpi_and_kokkos(argc, argv, {argv[0], 2, true}, [&] {
    int rank = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    Options o;
    const std::string bad = parse(argc, argv, o);
    std::string why;
    std::unique_ptr<Communicator> comm;
    if (bad.empty()) comm = make_backend(o.backend, MPI_COMM_WORLD, why);
    if (!bad.empty() || !comm) {
      if (rank == 0) {
        if (bad != "help")
          std::fprintf(stderr, "trident_collectives_bench: error: %s\n",
                       bad.empty() ? why.c_str() : bad.c_str());
        usage();
      }
      return bad == "help" ? 0 : 2;
    }

    const std::vector<size_t> size_list = sizes(o);
    if (rank == 0) {
      std::printf("# trident_collectives_bench: backend %s, %d ranks, float32\n", comm->backend(),
                  n);
      std::printf(
          "# sizes %zu..%zu B, x%g; warmup %d, iters %d (fewer when a size would take "
          "over %.2g s)\n",
          o.min_bytes, o.max_bytes, o.factor, o.warmup, o.iters, o.max_seconds);
      std::printf(
          "# time: mean over ranks of one call; algbw = S/t; busbw = algbw x 2(n-1)/n "
          "(all-reduce), x (n-1)/n (all-gather, reduce-scatter); GB = 1e9 B\n");
    }
    int64_t total_wrong = 0;
    for (const std::string& flag : o.ops) {
      const OpInfo op = op_info(flag);
      if (rank == 0) {
        std::printf("#\n# %s (%s), backend %s, %d ranks\n", op.name, op.mode, comm->backend(), n);
        std::printf("# %10s  %12s  %6s  %5s  %9s  %7s  %7s  %6s  %5s\n", "size", "count", "type",
                    "redop", "time", "algbw", "busbw", "#wrong", "iters");
        std::printf("# %10s  %12s  %6s  %5s  %9s  %7s  %7s  %6s  %5s\n", "(B)", "(elements)", "",
                    "", "(us)", "(GB/s)", "(GB/s)", "", "");
      }
      double busbw_sum = 0;
      int rows = 0;
      size_t last_count = 0;
      for (size_t bytes : size_list) {
        const size_t count = count_for(op.op, bytes, n);
        if (count == 0 || count == last_count) continue;  // no element per rank, or a repeat
        last_count = count;
        const size_t S = bytes_for(op.op, count, n);
        Buffers b = make_buffers(op.op, count, n, rank);
        run_once(*comm, op.op, b, count);
        Kokkos::fence();
        int64_t wrong = count_wrong(op.op, b, count, n, rank);
        MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        total_wrong += wrong;
        // Timing runs on zeros: in-place all-reduce would otherwise grow the values every call.
        Kokkos::deep_copy(b.recv, 0.0f);
        if (b.send.data()) Kokkos::deep_copy(b.send, 0.0f);
        const std::function<void()> call = [&] { run_once(*comm, op.op, b, count); };
        // Warm-up, then cut the timed iterations to the time budget (the same on every rank).
        const double per_call = o.warmup > 0 ? max_over_ranks(time_calls(call, o.warmup, n)) : 0;
        int iters = o.iters;
        if (per_call > 0)
          iters = std::max(3, std::min(o.iters, static_cast<int>(o.max_seconds / per_call)));
        const double t = time_calls(call, iters, n);
        const double algbw = static_cast<double>(S) / t / 1e9;
        const double busbw = algbw * bus_factor(op.op, n);
        busbw_sum += busbw;
        ++rows;
        if (rank == 0)
          std::printf("  %10zu  %12zu  %6s  %5s  %9.2f  %7.3f  %7.3f  %6lld  %5d\n", S, count,
                      "float", op.redop, t * 1e6, algbw, busbw, static_cast<long long>(wrong),
                      iters);
      }
      if (rank == 0)
        std::printf("# %s avg bus bandwidth: %.3f GB/s over %d sizes\n", op.name,
                    rows ? busbw_sum / rows : 0.0, rows);
    }
    if (rank == 0) {
      std::printf("#\n# out of bounds values: %lld %s\n", static_cast<long long>(total_wrong),
                  total_wrong == 0 ? "OK" : "FAILED");
      std::fflush(stdout);
    }
    return total_wrong == 0 ? 0 : 1;
  });
}
