#!/bin/sh
echo healthy
