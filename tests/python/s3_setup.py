"""Prepares a moto S3 server for the remote-source tests and benchmark, as an independent client.

s3_setup.py ENDPOINT BUCKET [DIR PREFIX]

With INITIAL_NO_AUTH_ACTION_COUNT=3 set on the server, the first three requests (IAM: create a
user, an access key, an allow-s3 policy) go unauthenticated; every later request must carry a valid
SigV4 signature of that key. Then creates BUCKET and uploads every file under DIR to PREFIX/<its
path under DIR> with boto3. Prints {"key_id": ..., "secret": ...} as JSON.
"""
import json
import os
import sys

import boto3
from botocore.config import Config

endpoint, bucket = sys.argv[1], sys.argv[2]
anon = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup",
            aws_secret_access_key="setup")
iam = boto3.client("iam", **anon)
iam.create_user(UserName="tensorlane")
key = iam.create_access_key(UserName="tensorlane")["AccessKey"]
iam.put_user_policy(UserName="tensorlane", PolicyName="s3", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"],
                  config=Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket=bucket)
if len(sys.argv) > 3:
    root, prefix = sys.argv[3], sys.argv[4]
    for d, _, files in os.walk(root):
        for f in sorted(files):
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            s3.upload_file(p, bucket, f"{prefix}/{rel}" if prefix else rel)
print(json.dumps({"key_id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}))
