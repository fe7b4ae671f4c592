variable "region" {
  description = "AWS region of both datacenters (VPC peering and security-group references need one region)."
  type        = string
  default     = "us-east-1"
}

variable "availability_zones" {
  description = "Zones used by both datacenters."
  type        = list(string)
  default     = ["us-east-1a", "us-east-1b", "us-east-1c"]
}

variable "ami_id" {
  description = "A Debian 12 (bookworm) AMI."
  type        = string
}

variable "key_name" {
  description = "EC2 key pair for SSH (Ansible)."
  type        = string
}

variable "admin_cidr_blocks" {
  description = "Operator networks: SSH to every host, Airflow UI on the loaders."
  type        = list(string)
}

variable "app_cidr_blocks" {
  description = "App servers that produce into the live brokers."
  type        = list(string)
  default     = []
}

variable "live" {
  description = "The live (frontend) datacenter: address range and sizes."
  type = object({
    vpc_cidr        = string
    zookeeper_count = number
    broker_count    = number
  })
  default = {
    vpc_cidr        = "10.10.0.0/16"
    zookeeper_count = 3
    broker_count    = 2
  }
}

variable "offline" {
  description = "The offline datacenter: address range and sizes."
  type = object({
    vpc_cidr        = string
    zookeeper_count = number
    broker_count    = number
    mirror_count    = number
    loader_count    = number
    # Spark workers of the loads (inventory group spark_workers); 0: the loads run in local mode
    spark_worker_count = optional(number, 0)
  })
  default = {
    vpc_cidr           = "10.20.0.0/16"
    zookeeper_count    = 3
    broker_count       = 2
    mirror_count       = 0 # standalone mirror hosts (Ansible's ferry_mirror_kind: standalone); links need none
    loader_count       = 1
    spark_worker_count = 0
  }
}

variable "ports" {
  description = "Ports of the roles, the same in both datacenters; the inventory output passes them to Ansible (ferry_*_port, loader_airflow_api_port)."
  type = object({
    zookeeper          = number
    zookeeper_tls      = number
    zookeeper_peer     = number
    zookeeper_election = number
    broker             = number
    broker_tls         = number
    airflow            = number
    broker_metrics     = number
    mirror_metrics     = number
    dashboard          = number
    prometheus         = number
  })
  default = {
    zookeeper          = 2181
    zookeeper_tls      = 2281
    zookeeper_peer     = 2888
    zookeeper_election = 3888
    broker             = 9092
    broker_tls         = 9093
    airflow            = 8080
    broker_metrics     = 9308
    mirror_metrics     = 9309
    dashboard          = 8500
    prometheus         = 9090
  }
}

variable "spark_ports" {
  description = "Ports of the Spark standalone cluster; the inventory output passes them to Ansible (spark_master_*port, spark_worker_webui_port, loader_spark_driver_*port)."
  type = object({
    master        = number
    master_ui     = number
    master_rest   = number
    driver        = number
    block_manager = number
    worker_ui     = number
  })
  default = {
    master        = 7077
    master_ui     = 8090
    master_rest   = 6066
    driver        = 7078
    block_manager = 7079
    worker_ui     = 8091
  }
}

variable "ansible_user" {
  description = "The SSH user of the AMI (admin on Debian's cloud images)."
  type        = string
  default     = "admin"
}

variable "tags" {
  description = "Tags on every resource."
  type        = map(string)
  default     = {}
}

variable "security" {
  description = "sasl_ssl (default): the brokers serve clients and each other only on ports.broker_tls (SASL_SSL) and /metrics over HTTPS, so only TLS ports are opened (across the datacenter link too, ZooKeeper's client port aside); plaintext: ports.broker instead. Must agree with Ansible's ferry_security."
  type        = string
  default     = "sasl_ssl"
  validation {
    condition     = contains(["sasl_ssl", "plaintext"], var.security)
    error_message = "security must be sasl_ssl or plaintext."
  }
}

variable "zookeeper_tls" {
  description = "true (default): ZooKeeper's clients (in each datacenter and across the link) reach it on ports.zookeeper_tls (its secureClientPort) and ports.zookeeper is not opened; only with security = sasl_ssl (plaintext keeps ports.zookeeper). Must agree with Ansible's ferry_zookeeper_tls."
  type        = bool
  default     = true
}
