variable "name" {
  description = "Datacenter name: live (frontend) or offline."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}$", var.name))
    error_message = "name: lower-case letters, digits and dashes."
  }
}

variable "vpc_cidr" {
  description = "Address range of the datacenter's VPC, e.g. 10.10.0.0/16."
  type        = string
}

variable "availability_zones" {
  description = "Zones to spread the private subnets (and so the instances) over."
  type        = list(string)
}

variable "ami_id" {
  description = "Debian 12 image for every instance (Ansible installs the rest)."
  type        = string
}

variable "key_name" {
  description = "EC2 key pair Ansible logs in with."
  type        = string
}

variable "admin_cidr_blocks" {
  description = "Where operators come from: SSH to every host and the Airflow UI."
  type        = list(string)
}

variable "client_cidr_blocks" {
  description = "Producers and consumers outside the VPC allowed to reach the brokers (app servers)."
  type        = list(string)
  default     = []
}

variable "zookeeper_count" {
  description = "ZooKeeper servers (1, 3 or 5)."
  type        = number
  default     = 3
  validation {
    condition     = contains([1, 3, 5], var.zookeeper_count)
    error_message = "zookeeper_count: 1, 3 or 5 (an odd ensemble)."
  }
}

variable "broker_count" {
  description = "Brokers of the datacenter's cluster."
  type        = number
  default     = 2
}

variable "mirror_count" {
  description = "Mirror hosts (the offline datacenter runs them; 0 in live)."
  type        = number
  default     = 0
}

variable "loader_count" {
  description = "Loader hosts running Spark and Airflow (offline only; 0 in live)."
  type        = number
  default     = 0
}

variable "spark_worker_count" {
  description = "Spark workers of the loads (offline only; the master runs on the first loader)."
  type        = number
  default     = 0
}

variable "instance_types" {
  description = "EC2 instance type per role."
  type        = map(string)
  default = {
    zookeeper    = "t3.medium"
    broker       = "m6i.xlarge"
    mirror       = "m6i.large"
    loader       = "r6i.2xlarge"
    spark_worker = "r6i.2xlarge"
  }
}

variable "broker_volume_gb" {
  description = "Size of each broker's log volume."
  type        = number
  default     = 500
}

variable "ports" {
  description = "Ports the roles listen on."
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
  description = "Ports of the Spark standalone cluster ."
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

variable "tags" {
  description = "Tags added to every resource."
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
