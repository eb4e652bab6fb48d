module github.com/deputy-go/deputy

go 1.26
