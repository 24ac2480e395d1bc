// Shared main for every gtest executable: MPI, then Kokkos, then the tests,
// then finalisation in reverse (Cabana's mpi_test_main). Only rank 0 keeps
// gtest's default printer so MPI tests do not interleave output.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

int main(int argc, char** argv) {
  // SERIALIZED: the communicators' progress thread calls MPI while the main
  // thread computes, never both at once (comm/mpi_progress.hpp).
  int thread_level = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &thread_level);
  Kokkos::initialize(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int result = RUN_ALL_TESTS();
  // Any rank failing fails the test everywhere, so mpirun's exit code tells.
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  Kokkos::finalize();
  MPI_Finalize();
  return worst;
}
