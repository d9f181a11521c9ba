// The `trident` executable: train | generate | prepare subcommands.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <iostream>

#include "comm/grid.hpp"
#include "core/error.hpp"
#include "io/config.hpp"
#include "io/prepare.hpp"
#include "train/generate.hpp"
#include "train/trainer.hpp"

namespace {

constexpr int kExitBadInput = 2;

int run_train(MPI_Comm world, const std::string& config_path,
              const std::vector<std::string>& overrides, const trident::TrainOptions& options) {
  int world_size = 0;
  TRIDENT_MPI(MPI_Comm_size(world, &world_size));
  trident::Config config = trident::load_config(config_path, overrides);
  trident::validate(config, world_size);
  const trident::GridShape shape{config.parallel.pp, config.parallel.dp, config.parallel.tp};
  trident::Grid grid(world, shape);
  if (!grid.tp_groups_node_local() && grid.rank() == 0)
    std::fprintf(stderr,
                 "warning: a tensor-parallel group spans nodes; tp traffic will cross "
                 "the network (place ranks so tp groups share a node)\n");
  return trident::train(std::move(config), grid, options);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    CLI::App app{"trident: 3D-parallel GPT training on Kokkos and MPI"};
    app.require_subcommand(1);

    std::string config_path;
    trident::TrainOptions train_options;
    std::vector<std::string> overrides;
    auto* train = app.add_subcommand("train", "train a model (run under mpirun for several ranks)");
    train->add_option("--config", config_path, "run config (TOML), e.g. inputs/small.toml")
        ->required();
    train->add_option("--set", overrides, "override a key: --set run.steps=10 (repeatable)");
    train->add_option("--resume", train_options.resume, "continue from this checkpoint (.h5)");
    train->add_option("--dump-grads", train_options.dump_grads,
                      "write the first step's gradients, gathered to global shapes, to this .h5 "
                      "(checkpoint schema, /params); for layout checks");

    trident::GenerateOptions gen;
    auto* generate = app.add_subcommand("generate", "sample text from a checkpoint");
    generate->add_option("--ckpt", gen.checkpoint, "checkpoint (.h5)")->required();
    generate->add_option("--prompt", gen.prompt, "text to continue");
    generate->add_option("--tokens", gen.tokens, "tokens to sample")->capture_default_str();
    generate->add_option("--temperature", gen.temperature, "softmax temperature")
        ->capture_default_str();
    generate->add_option("--top-k", gen.top_k, "sample among the k most likely (0: all)")
        ->capture_default_str();
    generate->add_option("--seed", gen.seed, "sampling seed")->capture_default_str();

    trident::PrepareOptions prep;
    auto* prepare = app.add_subcommand("prepare", "build byte-level train/val token files");
    prepare->add_option("--text", prep.text_path, "UTF-8 text file, or - for stdin")->required();
    prepare->add_option("--out-dir", prep.out_dir, "output directory")->capture_default_str();
    prepare->add_option("--name", prep.name, "file name prefix")->capture_default_str();
    prepare->add_option("--val-fraction", prep.val_fraction, "share held out for validation")
        ->capture_default_str();

    try {
      app.parse(argc, argv);
      if (*train) {
        status = run_train(MPI_COMM_WORLD, config_path, overrides, train_options);
      } else if (*generate) {
        if (rank == 0) std::cout << trident::generate(gen) << std::endl;
      } else if (*prepare) {
        if (rank == 0) trident::prepare_byte_corpus(prep);
      }
    } catch (const CLI::ParseError& e) {
      status = app.exit(e);
      if (status != 0) status = kExitBadInput;
    } catch (const trident::InputError& e) {
      if (rank == 0) std::fprintf(stderr, "trident: error: %s\n", e.what());
      status = kExitBadInput;
    }
  }
  MPI_Finalize();
  return status;
}
