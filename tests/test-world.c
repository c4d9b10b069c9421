/* SPDX-License-Identifier: MIT */
/* tests/test-world.c: rank and world from each launcher's environment
 * (accel launch, OpenMPI, MPICH/Hydra, torchrun, srun, none), precedence,
 * and the messages for inconsistent values. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

/* A fake environment: NULL-terminated "NAME=VALUE" strings. */
static const char *fake_get(const char *name, void *ud)
{
	const char *const *env = ud;
	size_t n = strlen(name);
	for (; *env; env++)
		if (!strncmp(*env, name, n) && (*env)[n] == '=')
			return *env + n + 1;
	return NULL;
}

typedef struct got {
	int rc;
	accel_world_v1 w;
	char job[ACCEL_WORLD_JOB_ID_MAX];
	char addr[ACCEL_WORLD_ADDR_MAX];
	int port;
	const char *launcher;
	accel_err err;
} got;

static got detect(const char *const *env)
{
	got g;
	memset(&g, 0, sizeof(g));
	g.port = -5;
	g.launcher = "unset";
	g.rc = accelp_world_from_vars(fake_get, (void *)env, &g.w, g.job, sizeof(g.job), g.addr,
	                             sizeof(g.addr), &g.port, &g.launcher, &g.err);
	return g;
}

static void expect_world(const got *g, int rank, int world, int lrank, int lworld, int node,
                         int nnodes)
{
	ck_assert_msg(g->rc == ACCEL_OK, "rc %d: %s", g->rc, g->err.msg);
	ck_assert_uint_eq(g->w.struct_size, sizeof(accel_world_v1));
	ck_assert_int_eq(g->w.rank, rank);
	ck_assert_int_eq(g->w.world_size, world);
	ck_assert_int_eq(g->w.local_rank, lrank);
	ck_assert_int_eq(g->w.local_world_size, lworld);
	ck_assert_int_eq(g->w.node_rank, node);
	ck_assert_int_eq(g->w.num_nodes, nnodes);
}

START_TEST(accel_launch_env)
{
	const char *env[] = {"ACCEL_RANK=5", "ACCEL_WORLD_SIZE=8", "ACCEL_LOCAL_RANK=1",
	                     "ACCEL_LOCAL_WORLD_SIZE=4", "ACCEL_NODE_RANK=1", "ACCEL_NUM_NODES=2",
	                     "ACCEL_MASTER_ADDR=node0.example", "ACCEL_MASTER_PORT=29500",
	                     "ACCEL_JOB_ID=ab12/cd", "MASTER_PORT=1111",
	                     /* an enclosing srun step must not win */
	                     "SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=1", NULL};
	got g = detect(env);
	expect_world(&g, 5, 8, 1, 4, 1, 2);
	ck_assert_str_eq(g.launcher, "accel launch");
	ck_assert_str_eq(g.addr, "node0.example");
	ck_assert_int_eq(g.port, 29500); /* ACCEL_ beats the generic name */
	ck_assert_str_eq(g.job, "ab12_cd"); /* sanitized */
}
END_TEST

START_TEST(accel_defaults)
{
	const char *env[] = {"ACCEL_RANK=2", "ACCEL_WORLD_SIZE=3", NULL};
	got g = detect(env);
	expect_world(&g, 2, 3, 2, 3, 0, 1);
	ck_assert_str_eq(g.addr, "127.0.0.1"); /* one node: loopback */
	ck_assert_int_eq(g.port, 0);           /* unknown */
	ck_assert_str_eq(g.job, "");
}
END_TEST

START_TEST(openmpi_env)
{
	const char *env[] = {"OMPI_COMM_WORLD_RANK=6", "OMPI_COMM_WORLD_SIZE=8",
	                     "OMPI_COMM_WORLD_LOCAL_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=4",
	                     "PMIX_NAMESPACE=prterun-host-1234@1", "SLURM_PROCID=0",
	                     "SLURM_STEP_NUM_TASKS=1", "RANK=0", "WORLD_SIZE=1", NULL};
	got g = detect(env);
	expect_world(&g, 6, 8, 2, 4, 1, 2);
	ck_assert_str_eq(g.launcher, "mpirun (OpenMPI)");
	ck_assert_str_eq(g.job, "ompi-prterun-host-1234_1");
	ck_assert_str_eq(g.addr, ""); /* two nodes, no master given */
	ck_assert_int_eq(g.port, 0);
}
END_TEST

START_TEST(openmpi_round_robin_mapping)
{
	/* --map-by node: rank 1 is local rank 0 of node 1; the node is unknown */
	const char *env[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4",
	                     "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
	                     "MASTER_ADDR=10.1.2.3", "MASTER_PORT=4000", NULL};
	got g = detect(env);
	expect_world(&g, 1, 4, 0, 2, -1, -1);
	ck_assert_str_eq(g.addr, "10.1.2.3");
	ck_assert_int_eq(g.port, 4000);
}
END_TEST

START_TEST(mpich_env)
{
	const char *env[] = {"PMI_RANK=3", "PMI_SIZE=4", "MPI_LOCALRANKID=3", "MPI_LOCALNRANKS=4",
	                     "PMI_PORT=host:5555", NULL};
	got g = detect(env);
	expect_world(&g, 3, 4, 3, 4, 0, 1);
	ck_assert_str_eq(g.launcher, "mpiexec (MPICH/Hydra)");
	ck_assert_str_eq(g.job, "pmi-host_5555");
	ck_assert_str_eq(g.addr, "127.0.0.1");
}
END_TEST

START_TEST(mpich_without_local_info)
{
	const char *env[] = {"PMI_RANK=1", "PMI_SIZE=2", NULL};
	got g = detect(env);
	expect_world(&g, 1, 2, -1, -1, -1, -1);
	ck_assert_str_eq(g.job, "");
	ck_assert_str_eq(g.addr, "");
}
END_TEST

START_TEST(torchrun_env)
{
	const char *env[] = {"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
	                     "GROUP_RANK=1", "TORCHELASTIC_RUN_ID=none", "MASTER_ADDR=127.0.0.1",
	                     "MASTER_PORT=29400", NULL};
	got g = detect(env);
	expect_world(&g, 3, 4, 1, 2, 1, 2);
	ck_assert_str_eq(g.launcher, "torchrun");
	ck_assert_str_eq(g.job, "torch-none");
	ck_assert_int_eq(g.port, 29400);
}
END_TEST

/* torchrun's static rendezvous hosts torch's store on MASTER_PORT: accel's
 * store takes the port above it (ACCEL_MASTER_PORT still wins). */
START_TEST(torchrun_agent_store_port)
{
	got g = detect((const char *[]){"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=n0",
	                                "MASTER_PORT=29500", "TORCHELASTIC_USE_AGENT_STORE=True",
	                                NULL});
	ck_assert_int_eq(g.rc, ACCEL_OK);
	ck_assert_int_eq(g.port, 29501);
	g = detect((const char *[]){"RANK=1", "WORLD_SIZE=2", "MASTER_PORT=29500",
	                            "TORCHELASTIC_USE_AGENT_STORE=False", NULL});
	ck_assert_int_eq(g.port, 29500);
	g = detect((const char *[]){"RANK=1", "WORLD_SIZE=2", "MASTER_PORT=29500",
	                            "ACCEL_MASTER_PORT=4000", "TORCHELASTIC_USE_AGENT_STORE=True",
	                            NULL});
	ck_assert_int_eq(g.port, 4000);
}
END_TEST

START_TEST(srun_env)
{
	const char *env[] = {"SLURM_PROCID=5", "SLURM_STEP_NUM_TASKS=6", "SLURM_NTASKS=12",
	                     "SLURM_LOCALID=1", "SLURM_NODEID=2", "SLURM_STEP_NUM_NODES=3",
	                     "SLURM_STEP_TASKS_PER_NODE=2(x2),2", "SLURM_JOB_ID=4242",
	                     "SLURM_STEP_ID=3", "SLURM_STEP_NODELIST=gpu[07-09],cpu1", NULL};
	got g = detect(env);
	expect_world(&g, 5, 6, 1, 2, 2, 3);
	ck_assert_str_eq(g.launcher, "srun");
	ck_assert_str_eq(g.job, "slurm-4242.3");
	ck_assert_str_eq(g.addr, "gpu07");
	ck_assert_int_eq(g.port, 20000 + (4242 * 31 + 3) % 20000);
}
END_TEST

START_TEST(srun_uneven_nodes)
{
	const char *env[] = {"SLURM_PROCID=4", "SLURM_STEP_NUM_TASKS=5", "SLURM_LOCALID=0",
	                     "SLURM_NODEID=2", "SLURM_STEP_NUM_NODES=3",
	                     "SLURM_STEP_TASKS_PER_NODE=3,1(x2)", "SLURM_JOB_ID=7",
	                     "SLURM_STEP_NODELIST=n1,n2,n3", "MASTER_PORT=3333", NULL};
	got g = detect(env);
	expect_world(&g, 4, 5, 0, 1, 2, 3);
	ck_assert_str_eq(g.addr, "n1");
	ck_assert_int_eq(g.port, 3333);
}
END_TEST

START_TEST(batch_script_is_world_of_one)
{
	/* sbatch runs the script once with the allocation's task count: not a step */
	const char *env[] = {"SLURM_PROCID=0", "SLURM_NTASKS=8", "SLURM_JOB_ID=99", NULL};
	got g = detect(env);
	expect_world(&g, 0, 1, 0, 1, 0, 1);
	ck_assert_str_eq(g.launcher, "none");
}
END_TEST

START_TEST(nothing_set)
{
	const char *env[] = {"RANK=3", "HOME=/x", NULL}; /* RANK alone is not a launcher */
	got g = detect(env);
	expect_world(&g, 0, 1, 0, 1, 0, 1);
	ck_assert_str_eq(g.launcher, "none");
	char want[64];
	snprintf(want, sizeof(want), "solo-%ld", (long)getpid());
	ck_assert_str_eq(g.job, want);
	ck_assert_str_eq(g.addr, "127.0.0.1");
	ck_assert_int_eq(g.port, 0);
}
END_TEST

static void expect_error(const char *const *env, const char *msg)
{
	got g = detect(env);
	ck_assert_int_eq(g.rc, ACCEL_ERR_CONFIG);
	ck_assert_str_eq(g.err.msg, msg);
	/* outputs untouched */
	ck_assert_int_eq(g.port, -5);
	ck_assert_str_eq(g.launcher, "unset");
	ck_assert_uint_eq(g.w.struct_size, 0);
}

START_TEST(inconsistent_values)
{
	expect_error((const char *[]){"ACCEL_RANK=4", "ACCEL_WORLD_SIZE=4", NULL},
	             "ACCEL_RANK=4 is not in 0..ACCEL_WORLD_SIZE-1 (ACCEL_WORLD_SIZE=4) "
	             "(accel launch)");
	expect_error((const char *[]){"ACCEL_RANK=1", NULL},
	             "ACCEL_RANK is set but ACCEL_WORLD_SIZE is not: cannot tell the world of "
	             "accel launch");
	expect_error((const char *[]){"ACCEL_WORLD_SIZE=8", NULL},
	             "ACCEL_WORLD_SIZE is set but ACCEL_RANK is not: cannot tell the world of "
	             "accel launch");
	expect_error((const char *[]){"OMPI_COMM_WORLD_SIZE=8", NULL},
	             "OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not: cannot tell "
	             "the world of mpirun (OpenMPI)");
	expect_error((const char *[]){"ACCEL_RANK=x1", "ACCEL_WORLD_SIZE=2", NULL},
	             "ACCEL_RANK='x1' is not an integer (read as the world of accel launch)");
	expect_error((const char *[]){"OMPI_COMM_WORLD_RANK=9", "OMPI_COMM_WORLD_SIZE=8", NULL},
	             "OMPI_COMM_WORLD_RANK=9 is not in 0..OMPI_COMM_WORLD_SIZE-1 "
	             "(OMPI_COMM_WORLD_SIZE=8) (mpirun (OpenMPI))");
	expect_error((const char *[]){"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=8",
	                              "OMPI_COMM_WORLD_LOCAL_RANK=4",
	                              "OMPI_COMM_WORLD_LOCAL_SIZE=4", NULL},
	             "OMPI_COMM_WORLD_LOCAL_RANK=4 is not in 0..OMPI_COMM_WORLD_LOCAL_SIZE-1 "
	             "(OMPI_COMM_WORLD_LOCAL_SIZE=4) (mpirun (OpenMPI))");
	expect_error((const char *[]){"PMI_RANK=0", "PMI_SIZE=0", NULL},
	             "PMI_SIZE=0 is out of range: must be 1..2147483647 (read as the world of "
	             "mpiexec (MPICH/Hydra))");
	/* a size of 0, -1 or past INT_MAX: one rule, one message */
	expect_error((const char *[]){"ACCEL_RANK=0", "ACCEL_WORLD_SIZE=99999999999", NULL},
	             "ACCEL_WORLD_SIZE=99999999999 is out of range: must be 1..2147483647 (read "
	             "as the world of accel launch)");
	expect_error((const char *[]){"ACCEL_RANK=0", "ACCEL_WORLD_SIZE=0", NULL},
	             "ACCEL_WORLD_SIZE=0 is out of range: must be 1..2147483647 (read as the "
	             "world of accel launch)");
	expect_error((const char *[]){"ACCEL_RANK=0", "ACCEL_WORLD_SIZE=-1", NULL},
	             "ACCEL_WORLD_SIZE=-1 is out of range: must be 1..2147483647 (read as the "
	             "world of accel launch)");
	expect_error((const char *[]){"ACCEL_RANK=-1", "ACCEL_WORLD_SIZE=2", NULL},
	             "ACCEL_RANK=-1 is out of range: must be 0..2147483647 (read as the world "
	             "of accel launch)");
	expect_error((const char *[]){"ACCEL_RANK=99999999999", "ACCEL_WORLD_SIZE=2", NULL},
	             "ACCEL_RANK=99999999999 is out of range: must be 0..2147483647 (read as "
	             "the world of accel launch)");
	/* a task id other than a batch script's 0 without the step's size */
	expect_error((const char *[]){"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=1",
	                              "SLURM_JOB_ID=5", NULL},
	             "SLURM_PROCID=1 says this process is a task of a Slurm step, but "
	             "SLURM_STEP_NUM_TASKS is not set, so its world is unknown: start it with "
	             "srun (which sets both), or unset SLURM_PROCID to run it as a single "
	             "process");
	expect_error((const char *[]){"SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2",
	                              "SLURM_NODEID=3", "SLURM_STEP_NUM_NODES=2", NULL},
	             "SLURM_NODEID=3 is not in 0..SLURM_STEP_NUM_NODES-1 "
	             "(SLURM_STEP_NUM_NODES=2) (srun)");
	expect_error((const char *[]){"SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2",
	                              "SLURM_NODEID=0", "SLURM_STEP_TASKS_PER_NODE=2(y3)", NULL},
	             "SLURM_STEP_TASKS_PER_NODE='2(y3)' does not list the tasks of node "
	             "SLURM_NODEID=0 (srun)");
	expect_error((const char *[]){"ACCEL_RANK=0", "ACCEL_WORLD_SIZE=1",
	                              "ACCEL_MASTER_PORT=70000", NULL},
	             "ACCEL_MASTER_PORT='70000' is not a port number (1..65535)");
	/* -1 means "not given" inside; given, it is an error like any negative */
	expect_error((const char *[]){"ACCEL_RANK=0", "ACCEL_WORLD_SIZE=4",
	                              "ACCEL_LOCAL_WORLD_SIZE=-1", NULL},
	             "ACCEL_LOCAL_WORLD_SIZE=-1 is out of range: must be 1..2147483647 (read as "
	             "the world of accel launch)");
	expect_error((const char *[]){"ACCEL_RANK=0", "ACCEL_WORLD_SIZE=4", "ACCEL_NODE_RANK=-1",
	                              NULL},
	             "ACCEL_NODE_RANK=-1 is out of range: must be 0..2147483647 (read as the "
	             "world of accel launch)");
	/* strict integers: no spaces, no '+' */
	expect_error((const char *[]){"ACCEL_RANK= 1", "ACCEL_WORLD_SIZE=2", NULL},
	             "ACCEL_RANK=' 1' is not an integer (read as the world of accel launch)");
	expect_error((const char *[]){"ACCEL_RANK=1", "ACCEL_WORLD_SIZE=+2", NULL},
	             "ACCEL_WORLD_SIZE='+2' is not an integer (read as the world of accel launch)");
	expect_error((const char *[]){"RANK=0", "WORLD_SIZE=2", "GROUP_RANK=99", NULL},
	             "GROUP_RANK=99 is not in 0..WORLD_SIZE-1 (WORLD_SIZE=2) (torchrun)");
	/* task counts: no junk after a group, no overflow */
	expect_error((const char *[]){"SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2",
	                              "SLURM_NODEID=0", "SLURM_STEP_TASKS_PER_NODE=2(x2)junk", NULL},
	             "SLURM_STEP_TASKS_PER_NODE='2(x2)junk' does not list the tasks of node "
	             "SLURM_NODEID=0 (srun)");
	expect_error((const char *[]){"SLURM_PROCID=1", "SLURM_STEP_NUM_TASKS=2",
	                              "SLURM_NODEID=0", "SLURM_STEP_TASKS_PER_NODE=4294967298",
	                              NULL},
	             "SLURM_STEP_TASKS_PER_NODE='4294967298' does not list the tasks of node "
	             "SLURM_NODEID=0 (srun)");
}
END_TEST

/* The master address is the first host of the step's node list, with any
 * text after a bracket range kept. */
START_TEST(slurm_host_lists)
{
	static const struct {
		const char *list, *first;
	} cases[] = {
		{"SLURM_STEP_NODELIST=gpu[07-09]-ib,cpu1", "gpu07-ib"},
		{"SLURM_STEP_NODELIST=rack[1-2]-node[01-04]", "rack1-node01"},
		{"SLURM_STEP_NODELIST=n[3,5-6]", "n3"},
		{"SLURM_STEP_NODELIST=single", "single"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *env[] = {"SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=2", "SLURM_JOB_ID=1",
		                     cases[i].list, NULL};
		got g = detect(env);
		ck_assert_int_eq(g.rc, ACCEL_OK);
		ck_assert_str_eq(g.addr, cases[i].first);
	}
}
END_TEST

START_TEST(process_environment)
{
	/* the getenv path: Check runs each test in its own process */
	setenv("ACCEL_RANK", "1", 1);
	setenv("ACCEL_WORLD_SIZE", "2", 1);
	setenv("ACCEL_MASTER_PORT", "12345", 1);
	unsetenv("ACCEL_MASTER_ADDR");
	unsetenv("MASTER_ADDR");
	accel_world_v1 w;
	int port = 0;
	const char *l = NULL;
	accel_err err = {0};
	ck_assert_int_eq(accelp_world_from_env(&w, NULL, 0, NULL, 0, &port, &l, &err), ACCEL_OK);
	ck_assert_int_eq(w.rank, 1);
	ck_assert_int_eq(w.world_size, 2);
	ck_assert_int_eq(port, 12345);
	ck_assert_str_eq(l, "accel launch");
	char small[4];
	ck_assert_int_eq(accelp_world_from_env(&w, small, 0, NULL, 0, NULL, NULL, &err),
	                 ACCEL_ERR_INVALID_ARG);
}
END_TEST

static Suite *world_suite(void)
{
	Suite *s = suite_create("world");
	TCase *tc = tcase_create("env");
	tcase_add_test(tc, accel_launch_env);
	tcase_add_test(tc, accel_defaults);
	tcase_add_test(tc, openmpi_env);
	tcase_add_test(tc, openmpi_round_robin_mapping);
	tcase_add_test(tc, mpich_env);
	tcase_add_test(tc, mpich_without_local_info);
	tcase_add_test(tc, torchrun_env);
	tcase_add_test(tc, srun_env);
	tcase_add_test(tc, srun_uneven_nodes);
	tcase_add_test(tc, batch_script_is_world_of_one);
	tcase_add_test(tc, nothing_set);
	tcase_add_test(tc, inconsistent_values);
	tcase_add_test(tc, slurm_host_lists);
	tcase_add_test(tc, torchrun_agent_store_port);
	tcase_add_test(tc, process_environment);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(world_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
