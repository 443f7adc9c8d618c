/* An MPI program as users write them: rank 0 and rank 1 ping-pong 4 KiB messages, each echo
 * checked, then every rank takes part in an MPI_Allreduce of rank + 1, whose sum it checks.
 * Prints one line per rank; exits 0 only when everything checked out. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define ROUNDS 100
#define SIZE 4096

int main(int argc, char **argv)
{
	static char buf[SIZE];
	int rank, size, round;
	long mine, total = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (round = 0; round < ROUNDS; round++) {
		if (rank == 0) {
			memset(buf, round, SIZE);
			MPI_Send(buf, SIZE, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
			MPI_Recv(buf, SIZE, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (buf[0] != (char)(round + 1) || buf[SIZE - 1] != (char)(round + 1)) {
				printf("rank 0: round %d came back wrong\n", round);
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
		} else if (rank == 1) {
			MPI_Recv(buf, SIZE, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			memset(buf, buf[SIZE - 1] + 1, SIZE);
			MPI_Send(buf, SIZE, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
		}
	}
	mine = rank + 1;
	MPI_Allreduce(&mine, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	printf("rank %d of %d: %d rounds, allreduce %ld\n", rank, size, ROUNDS, total);
	MPI_Finalize();
	return total == (long)size * (size + 1) / 2 ? 0 : 1;
}
