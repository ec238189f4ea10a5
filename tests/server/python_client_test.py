#!/usr/bin/python3
"""A second, independent client of slidedpd: Python grpcio (Debian python3-grpcio) with
code generated from proto/slidedp/v1/*.proto by protoc + grpc_python_plugin at test
time. Starts a real slidedpd, submits a tiny job, watches it to SUCCEEDED; checks the
health service, server reflection, error codes, and that malformed bytes do not take
the daemon down.

Usage: python_client_test.py --slidedpd=PATH --proto_dir=DIR --protoc=PATH
                             --grpc_python_plugin=PATH
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None


def generate(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    protos = [os.path.join("slidedp", "v1", name) for name in ("job.proto", "node.proto", "plan.proto", "service.proto")]
    subprocess.run([ARGS.protoc, "--proto_path=" + ARGS.proto_dir, "--python_out=" + out_dir,
                    "--grpc_python_out=" + out_dir,
                    "--plugin=protoc-gen-grpc_python=" + ARGS.grpc_python_plugin] + protos,
                   check=True)
    sys.path.insert(0, out_dir)


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="slidedp_py_")
        generate(os.path.join(cls.tmp, "gen"))
        global grpc, job_pb2, service_pb2, service_pb2_grpc
        import grpc
        from slidedp.v1 import job_pb2, service_pb2, service_pb2_grpc
        ready = os.path.join(cls.tmp, "ready.json")
        cls.log = open(os.path.join(cls.tmp, "slidedpd.log"), "w")
        cls.daemon = subprocess.Popen(
            [ARGS.slidedpd, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
             "--state_dir=" + os.path.join(cls.tmp, "state"), "--ready_file=" + ready],
            stdout=cls.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while not os.path.exists(ready):
            if time.time() > deadline or cls.daemon.poll() is not None:
                raise RuntimeError("slidedpd did not start")
            time.sleep(0.05)
        with open(ready) as f:
            cls.address = json.load(f)["listen"]
        cls.channel = grpc.insecure_channel(cls.address)
        cls.stub = service_pb2_grpc.TrainingServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.send_signal(signal.SIGTERM)
        try:
            cls.daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            cls.daemon.kill()
        cls.log.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_alive(self):
        node = self.stub.GetNode(service_pb2.GetNodeRequest(), timeout=10)
        self.assertTrue(node.daemon_version)

    def test_submit_and_watch_to_succeeded(self):
        spec = job_pb2.JobSpec(model="tiny", seq_len=64, micro_batch_size=4, steps=10)
        spec.data.format = "synthetic"
        job = self.stub.SubmitJob(service_pb2.SubmitJobRequest(spec=spec), timeout=30)
        self.assertTrue(job.id.startswith("job-"))
        self.assertEqual(job.state, job_pb2.JOB_STATE_QUEUED)
        self.assertTrue(job.spec.HasField("grad_accum"), "the daemon fills in defaults")
        steps, last = 0, None
        for event in self.stub.WatchJob(service_pb2.WatchJobRequest(id=job.id), timeout=180):
            if event.type == job_pb2.JobEvent.TYPE_STEP:
                steps += 1
                self.assertEqual(event.step.step, event.job.step)
                self.assertGreater(event.step.tokens, 0)
            last = event
        self.assertIsNotNone(last)
        self.assertEqual(last.job.state, job_pb2.JOB_STATE_SUCCEEDED, last.job.error)
        self.assertGreater(steps, 0)
        self.assertRegex(last.job.weights_digest, "^[0-9a-f]{16}$")
        got = self.stub.GetJob(service_pb2.GetJobRequest(id=job.id), timeout=10)
        self.assertEqual(got.step, 10)
        listed = self.stub.ListJobs(
            service_pb2.ListJobsRequest(states=[job_pb2.JOB_STATE_SUCCEEDED]), timeout=10)
        self.assertIn(job.id, [j.id for j in listed.jobs])

    def test_error_codes_name_the_problem(self):
        with self.assertRaises(grpc.RpcError) as bad:
            self.stub.SubmitJob(service_pb2.SubmitJobRequest(spec=job_pb2.JobSpec(seq_len=-2)), timeout=10)
        self.assertEqual(bad.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("seq_len", bad.exception.details())
        with self.assertRaises(grpc.RpcError) as missing:
            self.stub.GetJob(service_pb2.GetJobRequest(id="job-ffffffffffff"), timeout=10)
        self.assertEqual(missing.exception.code(), grpc.StatusCode.NOT_FOUND)
        spec = job_pb2.JobSpec()
        spec.data.format = "tokens"
        spec.data.path = "/etc/passwd"
        with self.assertRaises(grpc.RpcError) as denied:
            self.stub.SubmitJob(service_pb2.SubmitJobRequest(spec=spec), timeout=10)
        self.assertEqual(denied.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assert_alive()

    def test_malformed_bytes_do_not_take_the_daemon_down(self):
        raw = self.channel.unary_unary("/slidedp.v1.TrainingService/SubmitJob")
        for garbage in (b"\xff\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x05\x1a\x02\x08"):
            with self.assertRaises(grpc.RpcError) as error:
                raw(garbage, timeout=10)
            self.assertNotEqual(error.exception.code(), grpc.StatusCode.OK)
        # A well-formed message with a field number this daemon does not know.
        unknown = b"\x0a\x03\xc0\x3e\x01"  # spec { field 1000 (varint tag 0xc0 0x3e): 1 }
        with self.assertRaises(grpc.RpcError) as refused:
            raw(unknown, timeout=10)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("unknown field number 1000", refused.exception.details())
        self.assert_alive()

    def test_health_service_and_reflection(self):
        check = self.channel.unary_unary("/grpc.health.v1.Health/Check")
        service = b"slidedp.v1.TrainingService"
        response = check(b"\x0a" + bytes([len(service)]) + service, timeout=10)
        self.assertEqual(response, b"\x08\x01", "HealthCheckResponse{status: SERVING}")
        info = self.channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
        replies = list(info(iter([b"\x3a\x00"]), timeout=10))  # list_services: ""
        self.assertEqual(len(replies), 1)
        self.assertIn(service, replies[0])


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--slidedpd", required=True)
    parser.add_argument("--proto_dir", required=True)
    parser.add_argument("--protoc", required=True)
    parser.add_argument("--grpc_python_plugin", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
